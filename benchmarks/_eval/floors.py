"""The floors ours is held against: what bare deno (from the ``deno`` wheel) takes to start,
to sit idle and to answer a pipe, and what the 20k result's parts cost that no design skips."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import procfs

from .config import BIG_LEN, DENO_FLOOR_ARGS, DENSITY_WORKERS, ECHO_SCRIPT, SETTLE_SECONDS, SPIN_ECHO_SCRIPT


def deno_floor_commands(workdir: Path) -> dict[str, list[str]]:
    """The bare deno floor's command lines: deno from the ``deno`` wheel running an empty
    script, plainly, with the V8 flag our workers run with, and with every flag a worker runs
    with (no V8 code cache, which a worker cannot have without caching every guest eval on
    disk; jitless; gc exposed), the floor of this design; and, for the design before it, a
    script that only imports node:inspector, which a worker then loaded to evaluate in V8's
    REPL mode, and with it Deno's Node compatibility layer."""
    import deno

    binary = str(deno.find_deno_bin())
    script = workdir / "empty.js"
    script.write_text("", encoding="utf-8")
    inspector = workdir / "inspector.js"
    inspector.write_text('import "node:inspector";\n', encoding="utf-8")
    plain = [binary, *DENO_FLOOR_ARGS, str(script)]
    worker_flags = ["--no-code-cache", "--v8-flags=--jitless,--expose-gc"]
    commands = {
        "deno_floor": plain,
        "deno_floor_jitless": [binary, *DENO_FLOOR_ARGS, "--v8-flags=--jitless", str(script)],
        "deno_floor_inspector": [binary, *DENO_FLOOR_ARGS, str(inspector)],
        "deno_floor_worker_flags": [binary, *DENO_FLOOR_ARGS, *worker_flags, str(script)],
    }
    # Timed to the first byte they write (FIRST_BYTE), as a cold start is to its first result:
    # deno's own start to its first statement, and with the worker's own program compiled
    # and never run before it (V8's parse of the code every worker must have).
    first = workdir / "first-byte.js"
    first.write_text(FIRST_BYTE, encoding="utf-8")
    commands["deno_floor_first_byte"] = [binary, *DENO_FLOOR_ARGS, *worker_flags, str(first)]
    code = _worker_code()
    if code is not None:
        parsed = workdir / "worker-parsed.js"
        parsed.write_text(f"function never() {{\n{code}\n}}\n{FIRST_BYTE}", encoding="utf-8")
        commands["deno_floor_worker_code"] = [binary, *DENO_FLOOR_ARGS, *worker_flags, str(parsed)]
    return commands


# One byte to stdout, through deno's core: what the floors timed to a first byte write.
FIRST_BYTE = "const D = globalThis.Deno; D[D.internal].core.writeSync(1, new Uint8Array([120]));\n"
FIRST_BYTE_FLOORS = frozenset({"deno_floor_first_byte", "deno_floor_worker_code"})


def _worker_code() -> str | None:
    """The program a worker of ours starts from (the staged, joined worker), if this pydeno
    has one."""
    try:
        from pydeno.host.process import staging
    except ImportError:
        return None
    entry = staging.staged().entry
    return entry.read_text(encoding="utf-8") if entry.suffix == ".js" else None


def deno_floor_memory(workdir: Path, count: int = DENSITY_WORKERS) -> dict[str, Any]:
    """The memory floor: bare deno (from the ``deno`` wheel) left idle on a script that only
    waits, and on one that imports node:inspector first, as every worker of the design before
    this one did. For each, the
    USS and anonymous memory of one such process alone, then the PSS per process with
    ``count`` of them alive: what the idle-USS and density rows measure of our workers."""
    import deno

    binary = str(deno.find_deno_bin())
    read, _, _ = procfs.memory_reader()
    env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
    wait = "setInterval(() => {}, 3_600_000);\n"
    found: dict[str, Any] = {"processes": count}
    for prefix, text in (("", wait), ("inspector_", f'import "node:inspector";\n{wait}')):
        script = workdir / f"{prefix}idle.js"
        script.write_text(text, encoding="utf-8")
        argv = [binary, *DENO_FLOOR_ARGS, str(script)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            _start_idle(procs, 1, argv, env, workdir)
            found[f"{prefix}uss_bytes"] = read(procs[0].pid)[0]
            found[f"{prefix}anon_bytes"] = procfs.anonymous_bytes(procs[0].pid)
            _start_idle(procs, count - 1, argv, env, workdir)
            found[f"{prefix}pss_per_process_bytes"] = round(sum(read(p.pid)[1] for p in procs) / count)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    return found


def _start_idle(
    procs: list[subprocess.Popen[bytes]], n: int, argv: list[str], env: dict[str, str], workdir: Path
) -> None:
    """Start n more of argv into procs, let them settle, and fail if any has exited."""
    quiet = subprocess.DEVNULL
    for _ in range(n):
        procs.append(subprocess.Popen(argv, env=env, cwd=workdir, stdin=quiet, stdout=quiet, stderr=quiet))
    time.sleep(SETTLE_SECONDS)
    ended = [p.returncode for p in procs if p.poll() is not None]
    if ended:
        raise RuntimeError(f"an idle bare deno exited with {ended[0]}")


def spawn_to_first_byte_ns(argv: list[str], workdir: Path) -> int:
    """Time from starting argv to the first byte on its stdout (it must write one), with
    deno's cache in workdir; it is then waited for, untimed."""
    env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with proc.stdout:
        got = proc.stdout.read(1)
    t1 = time.perf_counter_ns()
    if proc.wait() != 0 or got != b"x":
        raise RuntimeError(f"{argv[0]} wrote {got!r} and exited with {proc.returncode}")
    return t1 - t0


def spawn_to_exit_ns(argv: list[str], workdir: Path) -> int:
    """Time from starting argv to its exit (it must succeed), with deno's cache in workdir."""
    env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
    t0 = time.perf_counter_ns()
    proc = subprocess.run(argv, env=env, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    t1 = time.perf_counter_ns()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited with {proc.returncode}: {proc.stderr.decode(errors='replace')[-300:]}")
    return t1 - t0


class EchoFloor:
    """A bare jitless deno (from the ``deno`` wheel) echoing bytes over pipes, back to back,
    neither side ever sleeping: deno retries its read of a non-blocking stdin at once, and
    this side retries its read of deno's stdout, as a warm worker and the host poll. What one
    byte there and back takes is the floor of any eval across a process boundary, before a
    byte of it is framed or evaluated."""

    def __init__(self, workdir: Path) -> None:
        import deno

        script = workdir / "spin-echo.js"
        script.write_text(SPIN_ECHO_SCRIPT, encoding="utf-8")
        env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
        argv = [str(deno.find_deno_bin()), *DENO_FLOOR_ARGS, "--v8-flags=--jitless", str(script)]
        read_end, self._write = os.pipe()
        os.set_blocking(read_end, False)
        try:
            self._proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=read_end, stdout=subprocess.PIPE)
        finally:
            os.close(read_end)
        assert self._proc.stdout is not None
        self._read = self._proc.stdout.fileno()
        os.set_blocking(self._read, False)

    def round_trip_ns(self) -> int:
        t0 = time.perf_counter_ns()
        os.write(self._write, b"x")
        while True:
            try:
                got = os.read(self._read, 64)
            except BlockingIOError:
                continue
            break
        t1 = time.perf_counter_ns()
        if got != b"x":
            raise RuntimeError(f"the echoing deno answered {got!r} or exited ({self._proc.poll()})")
        return t1 - t0

    def close(self) -> None:
        os.close(self._write)
        _end(self._proc)


class WakeFloor:
    """A bare jitless deno (from the ``deno`` wheel) echoing bytes over pipes: the floor of a
    pool's first eval, which goes to a process that has slept in a read since it started.
    ``round_trip_ns(slept)`` waits until the echo has slept that long since its last round
    trip, then times one byte there and back. Nothing of ours runs in it: what it takes is the
    machine waking a process that slept, and that process's caches gone cold, which grows with
    the sleep."""

    def __init__(self, workdir: Path, warm: int = 50) -> None:
        import deno

        script = workdir / "echo.js"
        script.write_text(ECHO_SCRIPT, encoding="utf-8")
        env = {"DENO_DIR": str(workdir / "cache"), "DENO_NO_UPDATE_CHECK": "1"}
        argv = [str(deno.find_deno_bin()), *DENO_FLOOR_ARGS, "--v8-flags=--jitless", str(script)]
        self._proc = subprocess.Popen(
            argv, env=env, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        try:
            for _ in range(warm):
                self._echo()
        except BaseException:
            self._proc.kill()
            self.close()
            raise
        self._last = time.perf_counter()

    def _echo(self) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(b"x")
        if self._proc.stdout.read(1) != b"x":
            raise RuntimeError(f"the echoing deno answered wrong or exited ({self._proc.poll()})")

    def round_trip_ns(self, slept: float) -> int:
        wait = self._last + slept - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        gc.collect()
        t0 = time.perf_counter_ns()
        self._echo()
        t1 = time.perf_counter_ns()
        self._last = time.perf_counter()
        return t1 - t0

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        _end(self._proc)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Wait for an echo whose stdin was closed to exit (killed if it will not), and close its
    stdout."""
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def json_decoder() -> Callable[[bytes], Any]:
    """The decoder our host reads the worker's JSON lane with (pydeno/host/_codec.py); only
    our side has it installed."""
    import msgspec

    return msgspec.json.Decoder().decode


def big_result_json() -> bytes:
    """BIG_CODE's value as JSON.stringify writes it: the text the 20k floor decodes."""
    items = [{"id": i, "name": f"x{i}"} for i in range(BIG_LEN)]
    return json.dumps(items, separators=(",", ":")).encode()
