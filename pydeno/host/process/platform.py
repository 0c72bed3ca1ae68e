"""What pydeno relies on of Linux (x86_64, glibc), one fact per name.

Each constant or function here encodes one thing the kernel, the C library or the ELF ABI
does, and its docstring or comment says which; the modules that supervise and confine a
worker ask here rather than knowing it themselves. Nothing here decides policy (what a
worker may do, which limit applies): only what the system is and how to ask it.

The launcher (``launcher.py``, a fresh ``python -I -S`` per zygote or worker) imports this
module too, by path, before and while it confines itself. So at import it loads only
modules built into the interpreter (``os``, ``sys``, ``errno`` and ``_signal``, the C half of
``signal``); those only the host needs (``signal``, which imports enum, and ``fcntl``) are
imported by the functions that use them, none of which the launcher calls, and none of which
a kill may need: a runtime left open is closed by its finalizer, maybe at interpreter exit,
when nothing can be imported any more.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub: the C half of signal
import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# --- the platform ------------------------------------------------------------------------------

SYSTEM: Final = "Linux" if sys.platform == "linux" else sys.platform
MACHINE: Final = os.uname().machine if hasattr(os, "uname") else "unknown"

# --- signals: the x86_64 Linux numbers (asm/signal.h), without the signal module ---------------

SIGILL: Final = 4
SIGTRAP: Final = 5
SIGABRT: Final = 6
SIGBUS: Final = 7
SIGFPE: Final = 8
SIGKILL: Final = 9
SIGSEGV: Final = 11
SIGCHLD: Final = 17
SIGCONT: Final = 18
SIGURG: Final = 23
SIGWINCH: Final = 28
SIGSYS: Final = 31

# Signals the kernel raises in a process itself, on a fault (a bad access, an illegal or
# trapping instruction, a bad syscall under seccomp) or an abort(3): input the process was
# given can cause any of them, so none is evidence of a kill from outside.
FAULT_SIGNALS: Final = frozenset({SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGSYS, SIGABRT})

# V8 on Linux ends the process on a fatal error with a trap instruction (SIGTRAP), after
# printing what the error was; these are its lines for running out of heap.
V8_FATAL_SIGNAL: Final = SIGTRAP
_V8_OUT_OF_MEMORY: Final = (b"\n# Fatal JavaScript out of memory", b"\n# Fatal process out of memory")


def v8_out_of_memory(stderr: bytes) -> bool:
    """Whether stderr holds V8's line for a fatal out-of-memory, at the start of a line (the
    process then ends by V8_FATAL_SIGNAL)."""
    text = b"\n" + stderr
    return any(line in text for line in _V8_OUT_OF_MEMORY)


def signal_name(number: int) -> str | None:
    """The C name of a signal number (``SIGKILL``), or None for one this system has none for."""
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def returncode(status: os.waitid_result) -> int:
    """A waitid(2) result as :class:`subprocess.Popen` reports it: the exit code for a process
    that exited (CLD_EXITED), else minus the signal that ended it (si_status)."""
    return status.si_status if status.si_code == os.CLD_EXITED else -status.si_status


# --- pidfds -----------------------------------------------------------------------------------

# pidfd_send_signal(2) flag: signal the process group the pidfd's process leads, not only the
# process (Linux 6.9; older kernels refuse any flag with EINVAL).
PIDFD_SIGNAL_PROCESS_GROUP: Final = 1 << 2
# Whether this kernel took the flag; learnt from the first EINVAL.
_pidfd_group_signals = True


def pidfd_signal_group(pidfd: int, sig: int) -> None:
    """Send sig through a pidfd to the process group its process leads, or where the kernel
    cannot address a group through a pidfd (before 6.9), to the process alone.
    ProcessLookupError once the process has exited."""
    global _pidfd_group_signals
    if _pidfd_group_signals:
        try:
            _signal.pidfd_send_signal(pidfd, sig, None, PIDFD_SIGNAL_PROCESS_GROUP)
            return
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            _pidfd_group_signals = False
    _signal.pidfd_send_signal(pidfd, sig)


def check_pidfds() -> None:
    """Raise OSError unless this process can hold its children by pidfd: pidfd_open(2) (Linux
    5.3) and waitid(P_PIDFD) (5.4), and a Python that offers both."""
    if not hasattr(os, "pidfd_open") or not hasattr(os, "P_PIDFD"):
        raise OSError("this Python has no pidfd support")
    own = os.pidfd_open(os.getpid())
    try:
        os.waitid(os.P_PIDFD, own, os.WEXITED | os.WNOHANG)
    except ChildProcessError:
        pass  # P_PIDFD is known: this process is just not its own child
    finally:
        os.close(own)


# --- pipes ------------------------------------------------------------------------------------

# The largest pipe buffer an unprivileged process may ask for with F_SETPIPE_SZ: the default of
# /proc/sys/fs/pipe-max-size. A pipe starts with 64 KiB.
PIPE_MAX_SIZE: Final = 1 << 20


def grow_pipe(fd: int, size: int = PIPE_MAX_SIZE) -> None:
    """Ask the kernel for a pipe buffer of size bytes (fcntl F_SETPIPE_SZ, Linux 2.6.35); a
    refusal, or a platform without the operation, leaves the pipe as it was."""
    import fcntl

    # Not contextlib.suppress: the launcher imports this module, and its imports would add to
    # that fresh interpreter's start-up.
    try:  # noqa: SIM105
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except (OSError, AttributeError):
        pass


# --- procfs (proc(5)) -------------------------------------------------------------------------

_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")
# In /proc/<pid>/status: the seccomp mode (0 none, 1 strict, 2 filter).
SECCOMP_MODE_FILTER: Final = "2"


def _stat_threads_and_rss(stat: bytes) -> tuple[int, int]:
    # Fields 20 (num_threads) and 24 (rss, in pages), counted after the command name, which is
    # in parentheses and may hold spaces; after its closing parenthesis the state (field 3)
    # comes first.
    fields = stat.rpartition(b")")[2].split()
    return int(fields[17]), int(fields[21]) * _PAGE_SIZE


def threads_and_rss(pid: int) -> tuple[int, int]:
    """A process's thread count and resident size in bytes, from /proc/<pid>/stat. OSError,
    IndexError or ValueError where unreadable."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return _stat_threads_and_rss(stat.read())


def open_stat(pid: int) -> int:
    """A descriptor on /proc/<pid>/stat, for :func:`stat_threads_and_rss`. It stays
    bound to that process: once the process is reaped a read fails (ESRCH), so it never reads
    another one that took the pid. OSError where it cannot be opened."""
    return os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)


def stat_threads_and_rss(stat: int) -> tuple[int, int]:
    """:func:`threads_and_rss` through a descriptor from :func:`open_stat`, in one pread(2)
    and no open: what a sampler that reads the same process many times a second wants.
    ProcessLookupError once the process is reaped; OSError, IndexError or ValueError where
    unreadable."""
    return _stat_threads_and_rss(os.pread(stat, 1024, 0))


def cpu_clock(pid: int) -> int:
    """The id of a process's CPU-time clock, for time.clock_gettime(): the time (user +
    system, all its threads, the ended ones too) it has used, to the nanosecond, in one
    syscall. The kernel encodes it as ``(~pid << 3) | CPUCLOCK_SCHED`` (2), what
    clock_getcpuclockid(3) returns (include/linux/posix-timers.h). Any process's clock may be
    read, a zombie's too; once the process is reaped, reading it raises OSError (EINVAL)."""
    return (~pid << 3) | 2


def proc_status(pid: int | str = "self") -> dict[str, str]:
    """/proc/<pid>/status as {field: value}: Uid, CapEff, NoNewPrivs, Seccomp, ... OSError
    where unreadable. Read as bytes and decoded by the interpreter's built-in UTF-8 codec: a
    process that dropped its privileges may no longer be able to import a codec."""
    with open(f"/proc/{pid}/status", "rb") as status:
        text = status.read().decode("utf-8", "replace")
    return {key: value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())}


def network_namespace(pid: int | str = "self") -> str:
    """The identity of a process's network namespace (the /proc/<pid>/ns/net link target)."""
    return os.readlink(f"/proc/{pid}/ns/net")


def max_fd() -> int:
    """One above the highest descriptor this process has open (/proc/self/fd), or where that
    cannot be read, the descriptor limit (sysconf OPEN_MAX)."""
    try:
        return max(int(name) for name in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return os.sysconf("SC_OPEN_MAX")


# --- cgroups (cgroups(7)) ---------------------------------------------------------------------


def cgroup_membership() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path, from the
    ``hierarchy-ID:controllers:path`` lines of /proc/self/cgroup."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup") as table:
        for line in table:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def cgroup_mounts(controllers: tuple[str, ...] = ("memory", "pids")) -> dict[str, str]:
    """Where each of these v1 controllers' trees is mounted, and under "" the v2 tree, from
    /proc/self/mountinfo: the mount point is field 5, and after the "-" separator come the
    filesystem type ("cgroup2", or "cgroup" with its controllers among the super options)."""
    found: dict[str, str] = {}
    with open("/proc/self/mountinfo") as table:
        for line in table:
            fields = line.split()
            separator = fields.index("-")
            kind, options = fields[separator + 1], fields[separator + 3].split(",")
            if kind == "cgroup2":
                found.setdefault("", fields[4])
            elif kind == "cgroup":
                for option in options:
                    if option in controllers:
                        found.setdefault(option, fields[4])
    return found


# --- the C library and the ELF loader ---------------------------------------------------------

# Where glibc is installed on x86_64 Linux: Debian's multiarch directories, then the 64-bit
# and the plain library directories (Fedora, Arch, Alpine's musl aside).
_LIBRARY_CANDIDATES: Final = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)
# The x86_64 ELF interpreter (the dynamic loader) every dynamically linked program names in
# its PT_INTERP header; the System V ABI fixes the path.
ELF_INTERPRETER: Final = "/lib64/ld-linux-x86-64.so.2"
_library_dirs: tuple[str, ...] | None = None


def library_dirs() -> tuple[str, ...]:
    """The directories holding the C library (those with libc.so.6), resolved: on merged-/usr
    systems /lib is a link into /usr/lib. Looked up once per process."""
    global _library_dirs
    if _library_dirs is None:
        found: list[str] = []
        for candidate in _LIBRARY_CANDIDATES:
            if os.path.exists(os.path.join(candidate, "libc.so.6")):
                real = os.path.realpath(candidate)
                if real not in found:
                    found.append(real)
        _library_dirs = tuple(found)
    return _library_dirs


def elf_interpreter() -> str:
    """The dynamic loader's real path: a program's exec maps it, so a process confined to the
    files it may execute needs it as much as the program."""
    return os.path.realpath(ELF_INTERPRETER)


def interpreter() -> str:
    """The Python that runs the launcher (and other helper programs). A venv's ``python`` is a
    link to its base interpreter; under ``-I -S`` both see the same standard library and no
    site-packages (the venv only adds those, through site), and the real binary skips the
    venv lookup."""
    return os.path.realpath(sys.executable)
