"""host/_staging, host/_command and host/_process: locating deno, the worker's command line
and environment, start failures, the stderr ring and the kill."""

from __future__ import annotations

import os
import subprocess
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno import _deno
from pydeno.host import _command, _process, _staging
from pydeno.host._command import WorkerConfig
from pydeno.host._protocol import EXIT_DONE
from pydeno.host._staging import find_deno

MiB = 2**20


def _config(**overrides: object) -> WorkerConfig:
    values: dict[str, object] = {
        "max_memory": 512 * MiB,
        "max_message_bytes": MiB,
        "jitless": True,
        "max_depth": 128,
    }
    values.update(overrides)
    return WorkerConfig(**values)  # type: ignore[arg-type]


def test_find_deno_uses_the_binary_the_deno_wheel_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYDENO_DENO", raising=False)
    path = Path(find_deno())
    assert path.name == "deno" and os.access(path, os.X_OK)


def test_threads_finding_deno_at_once_all_find_it_while_sysconfig_fills_slowly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wheel's lookup reads sysconfig, whose first fill is not thread-safe: a second
    # reader during it sees the dict half-filled. Slowing that fill makes the race certain.
    monkeypatch.delenv("PYDENO_DENO", raising=False)
    monkeypatch.setattr(_deno, "_wheel_deno", [])
    monkeypatch.setattr(sysconfig, "_CONFIG_VARS", None)
    fill = sysconfig._init_posix  # type: ignore[attr-defined]

    def slow_fill(values: dict[str, Any]) -> None:
        time.sleep(0.2)
        fill(values)

    monkeypatch.setattr(sysconfig, "_init_posix", slow_fill)
    found: list[str] = []
    failed: list[BaseException] = []
    start = threading.Barrier(4)

    def find() -> None:
        start.wait()
        try:
            found.append(find_deno())
        except (TypeError, OSError) as exc:  # what a half-filled sysconfig raises
            failed.append(exc)

    threads = [threading.Thread(target=find) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and len(found) == 4 and len(set(found)) == 1 and Path(found[0]).name == "deno"


def test_pydeno_deno_overrides_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYDENO_DENO", "/opt/elsewhere/deno")
    assert find_deno() == "/opt/elsewhere/deno"


def test_a_missing_deno_binary_is_a_clear_start_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYDENO_DENO", str(tmp_path / "no-such-deno"))
    with pytest.raises(pydeno.WorkerCrashed, match=r"^worker failed to start: No such file or directory") as info:
        pydeno.Runtime()
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_a_deno_binary_that_cannot_run_is_a_clear_start_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "deno"
    fake.write_text("not a program")
    fake.chmod(0o644)
    monkeypatch.setenv("PYDENO_DENO", str(fake))
    with pytest.raises(pydeno.WorkerCrashed, match=r"^worker failed to start: Permission denied") as info:
        pydeno.Runtime()
    assert isinstance(info.value.__cause__, PermissionError)


def test_the_worker_gets_no_permission_but_the_inspector_and_its_settings_it_revokes() -> None:
    argv = _config().argv("deno", Path("/w/main.ts"))
    grants = [a for a in argv if a.startswith("--allow")]
    assert grants == ["--allow-sys=inspector", f"--allow-env={_command.SETTINGS_VARIABLE}"]
    # The settings travel in the environment: the guest can read the command line back.
    assert argv[-1] == "/w/main.ts"
    for flag in ("--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm"):
        assert flag in argv


@pytest.mark.parametrize("selftest", [None, {"read": []}])
def test_deno_keeps_no_code_cache_of_what_the_worker_evaluates(selftest: dict[str, list[str]] | None) -> None:
    # Deno's code cache serves evalContext too: without the flag every eval of new code was
    # serialized for it, and written to the shared cache file where the worker may write.
    argv = _config().argv("deno", Path("/w/main.ts"), selftest)
    assert "--no-code-cache" in argv
    assert argv.index("--no-code-cache") < argv.index("/w/main.ts")


@pytest.mark.parametrize(
    ("max_memory", "jitless", "expected"),
    [
        (512 * MiB, True, "--v8-flags=--max-old-space-size=384,--jitless,--min-semi-space-size=2"),
        (64 * MiB, False, "--v8-flags=--max-old-space-size=48,--min-semi-space-size=2"),
        (16 * MiB, True, "--v8-flags=--max-old-space-size=16,--jitless,--min-semi-space-size=2"),
        (None, False, "--v8-flags=--min-semi-space-size=2"),
    ],
)
def test_the_v8_heap_is_sized_from_max_memory(max_memory: int | None, jitless: bool, expected: str) -> None:
    assert expected in _config(max_memory=max_memory, jitless=jitless).argv("deno", Path("/w/main.ts"))


@pytest.mark.parametrize("jitless", [True, False])
def test_a_worker_starts_up_to_its_first_command_without_a_garbage_collection(jitless: bool) -> None:
    # The worker's own command line, with V8 printing each collection to stdout: the worker
    # says hello, finds its stdin closed and ends, and no collection ran on the way (at V8's
    # default young generation one scavenge did, between the hello and the first command).
    staged = _staging.staged()
    config = _config(max_memory=None, jitless=jitless)
    argv = [
        arg + ",--trace-gc" if arg.startswith("--v8-flags=") else arg for arg in config.argv(staged.deno, staged.entry)
    ]
    env = config.environment(staged.cache)
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
    assert done.returncode == EXIT_DONE, done.stderr[-500:]
    assert b"ms: " not in done.stdout, done.stdout[-500:]


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "best_effort", "require"])
def test_the_worker_gets_none_of_the_host_environment(monkeypatch: pytest.MonkeyPatch, sandbox: Any) -> None:
    # It gets only the location of pydeno's own deno cache, never the host user's, the
    # switch that keeps deno from looking up its download server from every worker, and its
    # own settings.
    monkeypatch.setenv("PYDENO_TEST_SECRET", "hunter2")
    with pydeno.Runtime(sandbox=sandbox) as rt:
        process = rt._sup.process
        assert process is not None
        entries = [e for e in Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0") if e]
        names = {e.partition(b"=")[0] for e in entries}
        assert names == {b"DENO_DIR", b"DENO_NO_UPDATE_CHECK", _command.SETTINGS_VARIABLE.encode()}
        assert b"DENO_NO_UPDATE_CHECK=1" in entries
        assert not any(b"hunter2" in e for e in entries)


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_deno_runs_with_deno_as_its_argv0_whatever_file_it_runs_from(sandbox: Any) -> None:
    # The guest reads argv[0] back (node:process's argv0); the binary's path would name the
    # host's virtualenv, or its staging directory.
    with pydeno.Runtime(sandbox=sandbox) as rt:
        process = rt._sup.process
        assert process is not None
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[0] == _command.DENO_ARGV0.encode() == b"deno"
        staged = _staging.stage(os.path.realpath(find_deno()), _staging.worker_entry())
        assert os.readlink(f"/proc/{process.pid}/exe") == staged.deno
        assert rt.eval("1 + 1") == 2


def test_the_worker_runs_in_its_own_session() -> None:
    with pydeno.Runtime() as rt:
        process = rt._sup.process
        assert process is not None
        assert os.getsid(process.pid) == process.pid != os.getsid(0)


def test_the_stderr_ring_keeps_only_the_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    with pydeno.Runtime() as rt:
        rt.eval("1")
        process = rt._sup.process
        assert process is not None
        r, w = os.pipe()
        os.set_blocking(r, False)
        monkeypatch.setattr(process, "stderr_fd", r)
        try:
            for i in range(100):
                os.write(w, f"line {i}\n".encode() * 100)
                process.drain_stderr()
            tail = process.stderr_tail()
        finally:
            os.close(r)
            os.close(w)
        assert len(tail) <= _process.STDERR_RING_BYTES
        assert tail.endswith(b"line 99\n")


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_signal_kill_ends_the_worker_and_leaves_the_reaping_to_its_owner(sandbox: str) -> None:
    # The monitor's way to kill: a zygote's child through its pidfd, a child of the host by
    # its process group; the runtime still learns of the death from the exit status.
    with pydeno.Runtime(sandbox=sandbox) as rt:  # type: ignore[arg-type]
        process = rt._sup.process
        assert process is not None
        process.signal_kill()
        assert process.popen.wait(timeout=10) == -9
        with pytest.raises(pydeno.WorkerCrashed, match="killed by SIGKILL"):
            rt.eval("1")
        process.signal_kill()  # after the fact: never raises
