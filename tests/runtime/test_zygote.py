"""host/process/spawner, host/process/zygote and host/process/launcher's serve mode: one
zygote per host forks every confined worker. It dies with the host, takes its workers with
it, retires itself when idle, reports each worker's exit as subprocess.Popen would, and a
zygote that dies or hangs costs the host neither a thread nor a descriptor: the next runtime
starts a new one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import pydeno
from pydeno.host.process import spawner as spawner_module
from pydeno.host.process import spec
from pydeno.host.process import worker as worker_module
from pydeno.host.process import zygote as zygote_module

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64" or os.geteuid() != 0,
    reason="the layers are Linux x86_64 only, and these checks assume a root host",
)


def _gone(pid: int) -> bool:
    """Whether pid has exited (a zombie counts: it runs nothing any more)."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


Launcher = Callable[..., None]


def _zygote_pid() -> int:
    zygote = spawner_module.spawner().zygote
    assert zygote is not None
    return zygote.popen.pid


def _no_zygote_and_no_thread() -> bool:
    spawner = spawner_module.spawner()
    return spawner.zygote is None and spawner.thread() is None


def _worker(rt: pydeno.Runtime) -> worker_module.WorkerProcess:
    process = rt._sup.process
    assert process is not None
    return process


def _retire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the spawner retire the zygote now, through its own idle path."""
    spawner = spawner_module.spawner()
    with monkeypatch.context() as patch:
        patch.setattr(spawner, "idle_seconds", 0.0)
        spawner.wake()
        assert _eventually(_no_zygote_and_no_thread)


@pytest.fixture
def runtime() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 1") == 2
        yield rt


def test_a_confined_worker_is_the_zygotes_child(runtime: pydeno.Runtime) -> None:
    worker = _worker(runtime)
    assert isinstance(worker.popen, zygote_module.ZygoteChild)
    assert psutil.Process(worker.pid).ppid() == _zygote_pid()
    # The zygote is the host's child, in a session of its own, and infrastructure says so.
    zygote = _zygote_pid()
    assert psutil.Process(zygote).ppid() == os.getpid()
    assert os.getsid(zygote) == zygote != os.getsid(0)
    kept = spawner_module.infrastructure()
    # The zygote, and the spare it forks ahead of the next request (one at most).
    assert zygote in kept.processes and len(kept.processes) <= 2
    assert all(psutil.Process(pid).ppid() == zygote for pid in kept.processes - {zygote})
    thread = spawner_module.spawner().thread()
    assert thread is not None and kept.threads == {thread.ident}


def test_the_worker_inherits_nothing_of_the_zygote_but_its_three_pipes(runtime: pydeno.Runtime) -> None:
    zygote = _zygote_pid()
    zygote_fds = {os.readlink(f"/proc/{zygote}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote}/fd")}
    sockets = {target for target in zygote_fds if target.startswith("socket:")}
    assert sockets
    pid = _worker(runtime).pid
    targets = {fd: os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert all(targets[str(fd)].startswith("pipe:") for fd in (0, 1, 2))
    assert not sockets & set(targets.values())
    assert not any("pidfd" in target for target in targets.values())


def test_the_worker_is_confined_exactly_as_by_the_one_off_launcher(runtime: pydeno.Runtime) -> None:
    lines = Path(f"/proc/{_worker(runtime).pid}/status").read_text().splitlines()
    status = {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}
    assert (status["NoNewPrivs"], status["Seccomp"], status["Uid"].split()) == ("1", "2", ["65534"] * 4)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_worker_killed_from_outside_reports_its_signal(runtime: pydeno.Runtime, signum: int) -> None:
    worker = _worker(runtime)
    os.kill(worker.pid, signum)
    name = signal.Signals(signum).name
    with pytest.raises(pydeno.WorkerCrashed, match=rf"^worker process died \(killed by {name}\)"):
        runtime.eval("1")
    assert worker.popen.returncode == -signum


def test_an_exited_worker_keeps_its_pid_until_the_host_releases_it(runtime: pydeno.Runtime) -> None:
    worker = _worker(runtime)
    worker.popen.kill()
    assert worker.popen.wait(timeout=10) == -signal.SIGKILL
    # Unreaped: the pid (and the group it led) cannot be reused while the host may signal it.
    assert psutil.Process(worker.pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(pydeno.WorkerCrashed):
        runtime.eval("1")
    # The runtime closed on the failure, and a closed runtime's worker is reaped, not pending.
    assert runtime.closed
    assert not psutil.pid_exists(worker.pid)


def test_a_layer_refused_in_a_zygote_child_is_the_launchers_refusal(launch: Launcher) -> None:
    launch(missing_layers={"landlock": "simulated"})
    with pytest.raises(pydeno.WorkerCrashed, match="landlock is unavailable: simulated") as info:
        pydeno.Runtime()
    assert info.value.kind == "sandbox_unavailable"


@pytest.mark.slow
def test_the_zygote_retires_when_idle_and_the_next_runtime_starts_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawner_module.spawner(), "idle_seconds", 0.3)
    with pydeno.Runtime() as rt:
        assert rt.eval("2") == 2
        first = _zygote_pid()
        time.sleep(0.5)  # a live worker keeps it, however long
        assert spawner_module.spawner().zygote is not None and _zygote_pid() == first
    assert _eventually(_no_zygote_and_no_thread)
    assert not psutil.pid_exists(first)  # reaped, not left a zombie
    assert spawner_module.infrastructure() == spawner_module.Infrastructure(frozenset(), frozenset(), frozenset())
    with pydeno.Runtime() as rt:
        assert rt.eval("3") == 3
        assert _zygote_pid() != first


def test_a_killed_zygote_takes_its_workers_and_the_next_runtime_starts(runtime: pydeno.Runtime) -> None:
    zygote, worker = _zygote_pid(), _worker(runtime)
    os.kill(zygote, signal.SIGKILL)
    assert _eventually(lambda: _gone(worker.pid))
    with pytest.raises(pydeno.WorkerCrashed, match=r"^worker process died \(killed by SIGKILL\)"):
        runtime.eval("1")
    started = time.monotonic()
    with pydeno.Runtime() as rt:
        assert rt.eval("6 * 7") == 42
        assert _zygote_pid() != zygote
    assert time.monotonic() - started < 5
    assert not psutil.pid_exists(zygote)  # the dead one was reaped


def test_waiting_on_a_worker_whose_zygote_died_does_not_hang(runtime: pydeno.Runtime) -> None:
    worker = _worker(runtime)
    os.kill(_zygote_pid(), signal.SIGKILL)
    # The zygote took the worker's exit status with it: the parent-death signal is the answer.
    assert worker.popen.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.slow
def test_a_hung_zygote_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
        hung = _zygote_pid()
    os.kill(hung, signal.SIGSTOP)
    monkeypatch.setattr(spawner_module.spawner(), "reply_seconds", 0.5)
    with pydeno.Runtime() as rt:
        assert rt.eval("2") == 2
        assert _zygote_pid() != hung
    assert not psutil.pid_exists(hung)


@pytest.mark.slow
def test_a_zygote_that_answers_a_spawn_too_late_is_replaced_and_never_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its late reply would otherwise answer the next request: a worker's pid paired with
    # another worker's pipes.
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
        slow = _zygote_pid()
    os.kill(slow, signal.SIGSTOP)
    monkeypatch.setattr(spawner_module.spawner(), "reply_seconds", 0.5)

    def wake() -> None:
        with contextlib.suppress(ProcessLookupError):  # replaced, and so killed, already
            os.kill(slow, signal.SIGCONT)

    resume = threading.Timer(0.8, wake)
    resume.start()
    try:
        with pydeno.Runtime() as rt:
            assert rt.eval("2") == 2
            assert _zygote_pid() != slow
            assert psutil.Process(_worker(rt).pid).ppid() == _zygote_pid()
    finally:
        resume.join()
    assert not psutil.pid_exists(slow)


def test_without_a_zygote_the_one_off_launcher_starts_the_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A launcher whose serve mode says it cannot serve (as on a kernel without pidfds), and
    # which is otherwise the real one.
    real = spec.LAUNCHER
    fake = tmp_path / "launcher.py"
    fake.write_text(
        "import marshal, os, sys\n"
        "if sys.argv[1] == 'serve':\n"
        "    import _socket\n"
        "    channel = _socket.socket(fileno=int(sys.argv[2]))\n"
        "    channel.sendmsg([marshal.dumps(('unavailable', 'simulated'))])\n"
        "    raise SystemExit(0)\n"
        f"os.execv(sys.executable, [sys.executable, '-I', '-S', {str(real)!r}, *sys.argv[1:]])\n"
    )
    _retire(monkeypatch)
    spawner = spawner_module.spawner()
    monkeypatch.setattr(spawner, "launcher", fake)
    monkeypatch.setattr(spawner, "refused", None)
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 2") == 3
        worker = _worker(rt)
        assert isinstance(worker.popen, subprocess.Popen)
        assert Path(f"/proc/{worker.pid}/status").read_text().count("Seccomp:\t2") == 1
    assert spawner.refused == "simulated"
    assert spawner.zygote is None


@pytest.mark.slow
def test_runtimes_started_from_many_threads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    results: list[object] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(6)

    def one(n: int) -> None:
        try:
            gate.wait()
            with pydeno.Runtime() as rt:
                results.append(rt.eval(f"{n} * 2"))
                worker = _worker(rt)
                assert isinstance(worker.popen, zygote_module.ZygoteChild)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for round_ in range(2):
        if round_:
            _retire(monkeypatch)  # the second round races the zygote's start as well
        threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert sorted(results) == [n * 2 for n in range(6)]  # type: ignore[type-var]
        results.clear()


@pytest.mark.slow
def test_the_zygote_and_its_workers_die_with_a_killed_host() -> None:
    script = (
        "import os, threading, time, pydeno\n"
        "from pydeno.host.process import spawner\n"
        "rt = pydeno.Runtime(timeout=None)\n"
        "print(rt._sup.process.pid, spawner.spawner().zygote.popen.pid, flush=True)\n"
        "threading.Thread(target=rt.eval, args=('for (;;) {}',), daemon=True).start()\n"
        "time.sleep(0.3)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == -signal.SIGKILL, result.stderr
    worker, zygote = map(int, result.stdout.split())
    assert _eventually(lambda: _gone(zygote) and _gone(worker))


@pytest.mark.slow
def test_a_forked_host_starts_its_own_zygote() -> None:
    # The child of a fork has neither the spawner thread nor any claim on the parent's zygote.
    script = (
        "import os, sys, pydeno\n"
        "from pydeno.host.process import spawner\n"
        "with pydeno.Runtime() as rt:\n"
        "    rt.eval('1')\n"
        "    parent_zygote = spawner.spawner().zygote.popen.pid\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        with pydeno.Runtime() as inner:\n"
        "            ok = inner.eval('40 + 2') == 42 and spawner.spawner().zygote.popen.pid != parent_zygote\n"
        "        os._exit(0 if ok else 1)\n"
        "    _, status = os.waitpid(pid, 0)\n"
        "    print(os.waitstatus_to_exitcode(status), rt.eval('7'), flush=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "7"]


def _spare_after(**options: object) -> int:
    """The spare the zygote starts once two runtimes in a row asked for one spec."""
    for _ in range(2):
        with pydeno.Runtime(**options) as rt:  # type: ignore[arg-type]
            assert rt.eval("1 + 1") == 2
    zygote = spawner_module.spawner().zygote
    assert zygote is not None
    assert _eventually(lambda: bool(zygote.spare_pids()))
    (spare,) = zygote.spare_pids()
    return spare


def _waiting_for_its_settings(pid: int) -> bool:
    """Whether pid is deno, started and blocked in its read of stdin (its settings): the
    kernel names the syscall a process sleeps in, read (0) of descriptor 0."""
    process = psutil.Process(pid)

    def reading_stdin() -> bool:
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/syscall").read_text().split()[:2] == ["0", "0x0"]
        return False

    # Until its execve it is the launcher's interpreter, confining itself.
    return _eventually(lambda: process.name() == "deno" and reading_stdin())


def _groups(pid: int) -> set[str]:
    """The names of the cgroups pid is in (v1: per controller; v2: one)."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    return {line.rsplit("/", 1)[-1] for line in lines}


def test_a_spec_asked_for_once_gets_no_spare_and_twice_in_a_row_gets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    _retire(monkeypatch)
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
    zygote = spawner_module.spawner().zygote
    assert zygote is not None
    time.sleep(0.3)
    assert zygote.spare_pids() == frozenset()
    assert _spare_after()


def test_the_next_worker_is_the_spare_the_zygote_started_before_it_was_asked() -> None:
    spare = _spare_after()
    # Started as a whole worker: deno is running, confined, and waits for its settings.
    assert _waiting_for_its_settings(spare)
    with pydeno.Runtime() as third:
        assert third.eval("6 * 7") == 42
        worker = _worker(third)
        assert worker.pid == spare
        # Confined as any worker: the zygote's child, seccomp in force, no root.
        assert psutil.Process(spare).ppid() == _zygote_pid()
        assert worker.seccomp_filtered()
        assert psutil.Process(spare).uids().real != 0


def test_the_zygote_keeps_no_end_of_a_spares_pipes_once_it_has_handed_it_over() -> None:
    # Else the worker would never see end of file on its stdin when the host closes it.
    spare = _spare_after()
    held = {os.readlink(f"/proc/{spare}/fd/{fd}") for fd in (0, 1, 2)}
    with pydeno.Runtime() as rt:
        assert rt.eval("1") == 1
        assert _worker(rt).pid == spare
        zygote = _zygote_pid()
        assert not held & {os.readlink(f"/proc/{zygote}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote}/fd")}


def test_a_spare_is_in_a_cgroup_of_its_own_before_it_is_asked_and_the_host_adopts_it() -> None:
    spare = _spare_after(max_memory="96MiB")
    before = {name for name in _groups(spare) if name.startswith(f"pydeno-{os.getpid()}-s")}
    assert len(before) == 1
    with pydeno.Runtime(max_memory="96MiB") as rt:
        worker = _worker(rt)
        assert rt.eval("1") == 1
        assert worker.pid == spare
        group = worker.cgroup
        assert group is not None
        assert {d.name for d in group.dirs} == before
        # Its limits are this runtime's, set when the host took it.
        assert group.memory_dir is not None
        name = "memory.limit_in_bytes" if group.version == 1 else "memory.max"
        assert int((group.memory_dir / name).read_text()) == 96 * 2**20
        dirs = group.dirs
    # Closed: the group is gone with it, as any worker's.
    assert not any(d.exists() for d in dirs)


def test_a_spare_serves_a_runtime_with_its_own_limits() -> None:
    # The limits the worker enforces itself travel in its settings, not in the spec the spare
    # was started for.
    spare = _spare_after()
    with pydeno.Runtime(max_inflight_host_calls=2) as rt:
        assert _worker(rt).pid == spare
        rt.bind_function("f", lambda: 1)
        with pytest.raises(pydeno.JavaScriptError, match="more than 2 host calls in flight"):
            rt.eval("await Promise.all([f(), f(), f()])")


def test_a_spare_started_for_another_spec_is_ended_and_the_worker_started_anew() -> None:
    spare = _spare_after()
    with pydeno.Runtime(max_memory="128MiB") as rt:
        assert rt.eval("1") == 1
        assert _worker(rt).pid != spare
    assert _eventually(lambda: _gone(spare))


def test_a_spare_that_died_waiting_is_replaced_by_a_fresh_start() -> None:
    spare = _spare_after()
    os.kill(spare, signal.SIGKILL)
    zygote = spawner_module.spawner().zygote
    assert zygote is not None
    assert _eventually(lambda: spare not in zygote.spare_pids())
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 1") == 2
        assert _worker(rt).pid != spare


def test_a_spare_no_runtime_takes_within_its_idle_time_is_ended_with_its_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Starts have stopped coming: the host gets the spare's memory back, zygote or not.
    monkeypatch.setattr(spec, "SPARE_IDLE_SECONDS", 1.0)
    spare = _spare_after()
    mine = {name for name in _groups(spare) if name.startswith(f"pydeno-{os.getpid()}-s")}
    assert _eventually(lambda: _gone(spare))
    zygote = spawner_module.spawner().zygote
    assert zygote is not None and not zygote.gone
    assert _eventually(lambda: not zygote.spare_pids())
    assert _eventually(lambda: [e for e, _, _ in os.walk("/sys/fs/cgroup") if Path(e).name in mine] == [])
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 1") == 2


def test_the_groups_made_for_spares_go_with_the_zygote(monkeypatch: pytest.MonkeyPatch) -> None:
    spare = _spare_after()
    mine = {name for name in _groups(spare) if name.startswith(f"pydeno-{os.getpid()}-s")}
    assert mine
    _retire(monkeypatch)
    assert _eventually(lambda: _gone(spare))
    assert [entry for entry, _, _ in os.walk("/sys/fs/cgroup") if Path(entry).name in mine] == []


def test_a_spare_tells_the_host_what_its_launcher_skipped_and_what_its_self_test_found(launch: Launcher) -> None:
    # Written to the spare's own stderr, which becomes the worker's.
    launch(missing_layers={"landlock": "simulated"})
    with pytest.warns(RuntimeWarning, match="landlock is unavailable: simulated"):
        spare = _spare_after(sandbox="best_effort")
    # Without Landlock the self-test reads what it should not: the spare says so too.
    with pytest.warns(RuntimeWarning, match="landlock is unavailable: simulated; self-test: read /etc/passwd"):
        third = pydeno.Runtime(sandbox="best_effort")
    with third:
        assert _worker(third).pid == spare
        assert _worker(third).sandbox_skipped() == ["landlock is unavailable: simulated"]
    launch(missing_layers={}, silent_layers=frozenset({"seccomp"}))
    for _ in range(3):
        # The second and the third are the spare's: it tells of the breach as the first did.
        with pytest.raises(pydeno.WorkerCrashed, match=r"sandbox self-test failed: .*started a process"):
            pydeno.Runtime()


def test_a_spare_refused_under_require_is_reported_as_the_refusal(launch: Launcher) -> None:
    spare = _spare_after()
    launch(missing_layers={"landlock": "simulated"})
    for _ in range(3):
        with pytest.raises(pydeno.WorkerCrashed, match="landlock is unavailable: simulated") as info:
            pydeno.Runtime()
        assert pydeno.classify_error(info.value).kind == "sandbox_unavailable"
    assert _eventually(lambda: _gone(spare))
