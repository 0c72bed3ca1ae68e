"""host/_staging, host/_command and host/_process with real processes: start failures, the
worker's start-up and environment, the stderr ring and the kill. Locating deno and the worker's
command line, without a process, are tests/unit/test_worker_command.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno.host.process import spec as _command
from pydeno.host.process import staging as _staging
from pydeno.host.process import worker as _process
from pydeno.host.process.staging import find_deno
from pydeno.host.wire.protocol import EXIT_DONE
from tests.support.worker_config import _config


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
