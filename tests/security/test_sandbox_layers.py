"""host/process/layers: each OS confinement layer, applied in a child process on the real kernel.

Every probe runs twice, with and without its layer, so a probe that could never fail would
show up here as a failing "without" case rather than as a layer that seems to work.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pydeno.host.process import layers as layers_module
from pydeno.host.process.staging import find_deno

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64" or os.geteuid() != 0,
    reason="the layers are Linux x86_64 only, and the probes assume a root test process",
)

# Everything the probes use is imported before any layer is applied: once privileges are
# dropped or Landlock is on, the interpreter may no longer read its own stdlib.
PRELUDE = """
import ctypes, errno, json, os, signal, socket, sys, threading
from pydeno.host.process import layers as L
libc = ctypes.CDLL(None, use_errno=True)

def outcome(call):
    try:
        call()
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return "ok"

def c_outcome(rc):
    return "ok" if rc != -1 else errno.errorcode[ctypes.get_errno()]

def status_field(name):
    with open("/proc/self/status", "rb") as handle:
        return next(line.split()[1].decode() for line in handle if line.startswith(name.encode() + b":"))
"""


def run_child(layers: str, probe: str, *argv: str) -> Any:
    """Run PRELUDE, then ``layers`` (may be empty), then ``probe``; return the JSON it prints."""
    script = PRELUDE + textwrap.dedent(layers) + textwrap.dedent(probe)
    result = subprocess.run(
        [sys.executable, "-c", script, *argv], cwd=ROOT, capture_output=True, text=True, timeout=20, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


# --- no_new_privs -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_no_new_privs_shows_as_set_in_proc_status(layered: bool) -> None:
    layers = "L.set_no_new_privs()\n" if layered else ""
    assert run_child(layers, "print(json.dumps(status_field('NoNewPrivs')))") == ("1" if layered else "0")


# --- parent-death signal ----------------------------------------------------------------------

# An intermediate python starts the grandchild, waits until it is armed, reports its pid and
# exits; the grandchild then either dies with it or sleeps on as an orphan.
INTERMEDIATE = """
import subprocess, sys
grandchild = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=sys.argv[2],
)
assert grandchild.stdout.readline().strip() == "armed"
print(grandchild.pid, flush=True)
"""
GRANDCHILD = """
import os, time
from pydeno.host.process import layers as L
{arm}
print("armed", flush=True)
time.sleep(30)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_parent_death_signal_kills_the_child_when_its_parent_exits(layered: bool) -> None:
    arm = "L.set_parent_death_signal(os.getppid())" if layered else ""
    result = subprocess.run(
        [sys.executable, "-c", INTERMEDIATE, GRANDCHILD.format(arm=arm), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )
    grandchild = int(result.stdout.strip())
    deadline = time.monotonic() + 2.0
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.02)
    survived = _alive(grandchild)
    if survived:
        os.kill(grandchild, signal.SIGKILL)
    assert survived is not layered


def test_parent_death_signal_refuses_when_the_expected_parent_is_already_gone() -> None:
    probe = """
    try:
        L.set_parent_death_signal(os.getppid() + 100000)
    except L.LayerUnavailable as exc:
        print(json.dumps(str(exc)))
    """
    assert run_child("", probe).startswith("parent-death signal is unavailable: parent ")


def test_drop_privileges_keeps_an_armed_parent_death_signal() -> None:
    # The kernel clears the setting on a uid change; drop_privileges must arm it again.
    layers = "L.set_parent_death_signal(os.getppid())\nL.drop_privileges()\n"
    probe = """
    value = ctypes.c_int(0)
    libc.prctl(2, ctypes.byref(value), 0, 0, 0)  # PR_GET_PDEATHSIG
    print(json.dumps(value.value))
    """
    assert run_child(layers, probe) == signal.SIGKILL


# --- namespaces -------------------------------------------------------------------------------

LOOPBACK_PROBE = """
def loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.socket() as client:  # not create_connection: its idna codec may be unreadable
            client.settimeout(2)
            client.connect(server.getsockname())

print(json.dumps(outcome(loopback)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_a_fresh_network_namespace_has_no_loopback_to_connect_to(layered: bool) -> None:
    layers = "L.unshare_namespaces()\n" if layered else ""
    result = run_child(layers, LOOPBACK_PROBE)
    assert result == ("ENETUNREACH" if layered else "ok")


def test_namespaces_leave_the_root_mount_private() -> None:
    probe = """
    with open("/proc/self/mountinfo", "rb") as handle:
        root = next(line for line in handle if line.split()[4] == b"/")
    print(json.dumps(root.decode()))
    """
    assert "shared:" not in run_child("L.unshare_namespaces()\n", probe)


def test_namespaces_work_without_root_through_a_user_namespace() -> None:
    layers = "L.drop_privileges()\nL.unshare_namespaces()\n"
    probe = """
    with open("/proc/self/uid_map", "rb") as handle:
        uid_map = handle.read().split()
    print(json.dumps({"uid": os.getuid(), "uid_map": [int(n) for n in uid_map], "loopback": outcome(loopback)}))
    """
    result = run_child(layers, LOOPBACK_PROBE.replace("print(", "_ = (") + textwrap.dedent(probe))
    assert result["uid"] == 65534
    assert result["uid_map"] == [65534, 65534, 1]
    assert result["loopback"] == "ENETUNREACH"


# --- privilege drop ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_dropped_privileges_leave_nobody_unable_to_become_root_again(layered: bool) -> None:
    layers = "L.drop_privileges()\n" if layered else ""
    probe = """
    print(json.dumps({
        "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
        "cap_eff": status_field("CapEff"),
        "setuid0": outcome(lambda: os.setuid(0)),
    }))
    """
    result = run_child(layers, probe)
    if layered:
        assert result == {
            "ids": [[65534] * 3, [65534] * 3, []],
            "cap_eff": "0000000000000000",
            "setuid0": "EPERM",
        }
    else:
        assert result["ids"][0] == [0, 0, 0]
        assert result["setuid0"] == "ok"


# --- Landlock ---------------------------------------------------------------------------------

LANDLOCK_PROBE = """
def write():
    with open(os.path.join(sys.argv[1], "written"), "w") as handle:
        handle.write("x")

def bind():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))

def connect():
    with socket.socket() as sock:
        sock.connect(("127.0.0.1", 9))

print(json.dumps({
    "read_etc": outcome(lambda: open("/etc/hostname", "rb").close()),
    "list_prefix": outcome(lambda: os.listdir(sys.prefix)),
    "write_tmp": outcome(write),
    "tcp_bind": outcome(bind),
    "tcp_connect": outcome(connect),
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_landlock_allows_only_the_granted_reads_and_no_tcp(layered: bool, tmp_path: Path) -> None:
    layers = "L.set_no_new_privs()\nL.restrict_filesystem([sys.prefix, sys.argv[1]], [])\n" if layered else ""
    result = run_child(layers, LANDLOCK_PROBE, str(tmp_path))
    if layered:
        assert result == {
            "read_etc": "EACCES",
            "list_prefix": "ok",
            "write_tmp": "EACCES",
            "tcp_bind": "EACCES",
            "tcp_connect": "EACCES",
        }
    else:
        assert result == {
            "read_etc": "ok",
            "list_prefix": "ok",
            "write_tmp": "ok",
            "tcp_bind": "ok",
            "tcp_connect": "ECONNREFUSED",
        }


def test_landlock_write_paths_are_the_only_writable_places(tmp_path: Path) -> None:
    layers = "L.set_no_new_privs()\nL.restrict_filesystem([sys.prefix], [], write_paths=[sys.argv[1]])\n"
    result = run_child(layers, LANDLOCK_PROBE, str(tmp_path))
    assert (result["write_tmp"], result["read_etc"]) == ("ok", "EACCES")
    assert (tmp_path / "written").read_text() == "x"


def test_landlock_skips_paths_that_do_not_exist(tmp_path: Path) -> None:
    layers = "L.set_no_new_privs()\nL.restrict_filesystem(['/does/not/exist', sys.prefix], ['/nor/this'])\n"
    assert run_child(layers, LANDLOCK_PROBE, str(tmp_path))["list_prefix"] == "ok"


# --- seccomp ----------------------------------------------------------------------------------

SECCOMP_PROBE = """
def thread():
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

def clone_new_user():
    # A raw clone behaves like fork here; if it is let through, the copy just exits.
    pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return c_outcome(pid)

def unix_pair():
    a, b = socket.socketpair(socket.AF_UNIX)
    a.close()
    b.close()

def traceme():
    # Last: once traced by the test process, any signal (even SIGCHLD) would stop this child.
    return c_outcome(libc.ptrace(0, 0, None, None))  # PTRACE_TRACEME

print(json.dumps({
    "mount": c_outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
    "unshare": c_outcome(libc.unshare(0x04000000)),  # CLONE_NEWUTS
    "inet_socket": outcome(lambda: socket.socket(socket.AF_INET).close()),
    "inet6_socket": outcome(lambda: socket.socket(socket.AF_INET6).close()),
    "unix_socketpair": outcome(unix_pair),
    "clone_new_user": clone_new_user(),
    "clone3": c_outcome(libc.syscall(435, 0, 0)),
    "thread": outcome(thread),
    "fork": outcome(fork),
    # A missing file: without the filter the kernel says ENOENT, so nothing is ever replaced.
    "execve": c_outcome(libc.execve(b"/nonexistent/pydeno", None, None)),
    "execveat": c_outcome(libc.syscall(322, -100, b"/nonexistent/pydeno", 0, 0, 0)),
    "kill_parent": outcome(lambda: os.kill(os.getppid(), 0)),
    "kill_self": outcome(lambda: os.kill(os.getpid(), 0)),
    "tgkill_self": outcome(lambda: signal.pthread_kill(threading.get_ident(), 0)),
    "ptrace": traceme(),
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_seccomp_refuses_the_kernel_attack_surface_processes_exec_and_signals_but_not_threads(layered: bool) -> None:
    # The namespaces come first so that the unfiltered run's mount stays in a private tree.
    layers = "L.unshare_namespaces()\n" + ("L.set_no_new_privs()\nL.install_seccomp_filter()\n" if layered else "")
    result = run_child(layers, SECCOMP_PROBE)
    allowed = {"unix_socketpair": "ok", "thread": "ok", "kill_self": "ok", "tgkill_self": "ok"}
    guarded = ["ptrace", "mount", "unshare", "inet_socket", "inet6_socket", "clone_new_user", "fork", "kill_parent"]
    if layered:
        refused = {**dict.fromkeys(guarded, "EPERM"), "execve": "EPERM", "execveat": "EPERM", "clone3": "ENOSYS"}
        assert result == {**refused, **allowed}
    else:
        opened = {**dict.fromkeys(guarded, "ok"), "execve": "ENOENT", "execveat": "ENOENT", "clone3": "EINVAL"}
        assert result == {**opened, **allowed}


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_the_launchers_process_probe_finds_what_the_filter_lets_through(layered: bool) -> None:
    # Without the filter the probe forks for real (its child exits at once), execve runs and
    # the null signal reaches the host (here this test, the child's parent too); with it,
    # all are refused and the probe finds nothing.
    layers = "L.set_no_new_privs()\nL.install_seccomp_filter(exec_pointer=1)\n" if layered else ""
    found = run_child(layers, f"print(json.dumps(L.process_breaches({os.getpid()})))")
    opened = ["started a process", "ran execve for another program", f"signalled the host (pid {os.getpid()})"]
    assert found == ([] if layered else opened)


@pytest.mark.slow
def test_the_launchers_signal_probe_tries_the_parent_apart_from_the_host() -> None:
    # pid 1 stands for a host that is not the parent: both are signalled, each named.
    found = run_child("", "print(json.dumps(L.process_breaches(1)))")
    assert f"signalled its parent (pid {os.getpid()})" in found
    assert ("signalled the host (pid 1)" in found) == (os.geteuid() == 0)


REACH_PROBE = """
targets = {"read": ["/etc/passwd"], "list": ["/"], "write": [sys.argv[1]], "port": int(sys.argv[2])}
print(json.dumps(L.reach_breaches(targets)))
"""


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_the_launchers_file_and_network_probe_finds_what_the_layers_let_through(layered: bool, tmp_path: Path) -> None:
    # Without layers every probe gets through (the connection to a port no one listens on is
    # refused, which counts); with the namespaces and Landlock (reads of the interpreter's own
    # files only, no TCP), none does, and no file is left behind either way.
    layers = (
        "L.unshare_namespaces()\nL.set_no_new_privs()\nL.restrict_filesystem([sys.prefix], [])\n" if layered else ""
    )
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    found = run_child(layers, REACH_PROBE, str(tmp_path), str(port))
    if layered:
        assert found == []
    else:
        created = f"created {tmp_path}/.pydeno-selftest-"
        assert [b[: len(created)] if b.startswith(created) else b for b in found] == [
            "read /etc/passwd",
            "listed /",
            created,
            "listened on 127.0.0.1",
            f"reached 127.0.0.1:{port} (refused)",
        ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_launchers_connect_probe_reports_a_connection_it_made(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        found = run_child("", REACH_PROBE, str(tmp_path), str(port))
    assert found[-1] == f"connected to 127.0.0.1:{port}"


# Each signal that would end or stop the process, sent to itself in every way a worker could:
# by pid, to its own process group, and to one of its threads.
SELF_SIGNAL_PROBE = """
sigs = [int(s) for s in sys.argv[1].split(",")]
out = {}
for sig in sigs:
    out[f"kill {sig}"] = outcome(lambda: os.kill(os.getpid(), sig))
    out[f"killpg {sig}"] = outcome(lambda: os.kill(0, sig))
    out[f"tgkill {sig}"] = outcome(lambda: signal.pthread_kill(threading.get_ident(), sig))
print(json.dumps(out))
"""
FATAL_SIGNALS = [
    signal.SIGKILL,
    signal.SIGTERM,
    signal.SIGABRT,
    signal.SIGSEGV,
    signal.SIGTRAP,
    signal.SIGSTOP,
    signal.SIGUSR1,
    signal.SIGHUP,
    signal.SIGRTMIN + 1,
]


def test_seccomp_refuses_the_worker_every_fatal_or_stopping_signal_to_itself() -> None:
    layers = "L.set_no_new_privs()\nL.install_seccomp_filter()\n"
    result = run_child(layers, SELF_SIGNAL_PROBE, ",".join(str(int(s)) for s in FATAL_SIGNALS))
    assert set(result.values()) == {"EPERM"}, result
    assert len(result) == 3 * len(FATAL_SIGNALS)


def test_seccomp_still_lets_the_worker_send_itself_the_harmless_signals() -> None:
    layers = "L.set_no_new_privs()\nL.install_seccomp_filter()\n"
    harmless = [0, signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH]
    result = run_child(layers, SELF_SIGNAL_PROBE, ",".join(str(int(s)) for s in harmless))
    assert set(result.values()) == {"ok"}, result


@pytest.mark.slow
@pytest.mark.parametrize("layered", [False, True], ids=["without", "with"])
def test_a_process_that_kills_itself_dies_only_without_the_filter(layered: bool) -> None:
    layers = "L.set_no_new_privs()\nL.install_seccomp_filter()\n" if layered else ""
    script = PRELUDE + textwrap.dedent(layers) + "outcome(lambda: os.kill(os.getpid(), 9))\nprint('alive')\n"
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=20, check=False)
    assert (result.returncode, result.stdout.strip()) == ((0, "alive") if layered else (-signal.SIGKILL, ""))


def test_seccomp_refuses_x32_syscall_numbers() -> None:
    layers = "L.set_no_new_privs()\nL.install_seccomp_filter()\n"
    probe = "print(json.dumps(c_outcome(libc.syscall(101 | 0x40000000, 0, 0, 0, 0))))"
    assert run_child(layers, probe) == "ENOSYS"


def test_seccomp_reports_the_errno_when_the_kernel_refuses_the_filter() -> None:
    # Neither no_new_privs nor CAP_SYS_ADMIN: the kernel says EACCES.
    probe = """
    try:
        L.install_seccomp_filter()
    except L.LayerUnavailable as exc:
        print(json.dumps(str(exc)))
    """
    message = run_child("L.drop_privileges()\n", probe)
    assert message.startswith("seccomp is unavailable: ")
    assert "EACCES" in message


# --- errors ---------------------------------------------------------------------------------


def test_layer_unavailable_names_the_layer_and_the_reason() -> None:
    error = layers_module.LayerUnavailable("landlock", "landlock_create_ruleset failed: ENOSYS")
    assert str(error) == "landlock is unavailable: landlock_create_ruleset failed: ENOSYS"
    assert (error.layer, error.reason) == ("landlock", "landlock_create_ruleset failed: ENOSYS")


# --- all layers, then deno --------------------------------------------------------------------

ALL_LAYERS = """
deno, loader = sys.argv[1], sys.argv[2]
L.set_parent_death_signal(os.getppid())
L.unshare_namespaces()
L.drop_privileges()
L.set_no_new_privs()
reads = [os.path.dirname(deno), sys.prefix, "/usr", "/lib", "/lib64", "/etc", "/proc", "/dev", sys.argv[3]]
# The ELF interpreter is opened for execution too, so Landlock must grant it EXECUTE.
L.restrict_filesystem(reads, [deno, loader])
L.exec_confined([deno, "eval", "console.log(1+1)"], {})
"""


@pytest.mark.slow
def test_deno_runs_under_every_layer_at_once() -> None:
    deno = os.path.realpath(find_deno())
    loader = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + ALL_LAYERS, deno, loader, str(ROOT / "worker")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "2\n", "")
