"""Operating-system confinement layers for a deno worker, applied in the child before exec.

Each ``apply``-style function confines the *current* process and is meant to run in a
single-threaded child between fork and exec (a launcher, never ``preexec_fn`` in the threaded
host). A layer the kernel refuses raises :class:`LayerUnavailable` with the errno name, so the
caller decides whether running without it is acceptable. What a machine offers is reported
by :func:`pydeno.sandbox_status`, from a real worker.

Only Linux on x86_64 is supported: the syscall numbers, the seccomp audit arch and the
struct layouts below are that ABI's, and other arches raise rather than guess.
"""

from __future__ import annotations

import _socket
import ctypes
import errno
import os
import stat

# Relative even in the launcher, which imports this module as part of the package "process".
from . import platform
from .kernel import (
    AF_UNIX,
    AUDIT_ARCH_X86_64,
    BPF_JEQ_K,
    BPF_JGE_K,
    BPF_JSET_K,
    BPF_LD_W_ABS,
    BPF_RET_K,
    CLONE_NEW_ANY,
    CLONE_NEWUSER,
    CLONE_THREAD,
    DENIED_SYSCALLS,
    FS_ABI1,
    FS_EXECUTE,
    FS_FILE_RIGHTS,
    FS_IOCTL_DEV,
    FS_READ_DIR,
    FS_READ_FILE,
    FS_REFER,
    FS_TRUNCATE,
    LANDLOCK_CREATE_RULESET_VERSION,
    LANDLOCK_RULE_PATH_BENEATH,
    MS_PRIVATE,
    MS_REC,
    NAMESPACES,
    NET_BIND_TCP,
    NET_CONNECT_TCP,
    PR_GET_DUMPABLE,
    PR_GET_PDEATHSIG,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    PR_SET_SECCOMP,
    SECCOMP_ARCH,
    SECCOMP_ARG0_HIGH,
    SECCOMP_ARG0_LOW,
    SECCOMP_ARG1_LOW,
    SECCOMP_ARG2_LOW,
    SECCOMP_MODE_FILTER,
    SECCOMP_NR,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    SYSCALLS,
    X32_SYSCALL_BIT,
)

# The launcher imports this module at every worker start, where each stdlib import is start-up
# latency (typing, platform and signal alone cost ~25 ms); annotations-only imports stay here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any, Final

__all__ = [
    "LayerUnavailable",
    "drop_privileges",
    "exec_confined",
    "install_seccomp_filter",
    "prepare",
    "ready_to_exec",
    "restrict_filesystem",
    "set_no_new_privs",
    "set_parent_death_signal",
    "unshare_namespaces",
]


class LayerUnavailable(RuntimeError):
    """The kernel (or this platform) refused to apply one confinement layer."""

    def __init__(self, layer: str, reason: str) -> None:
        super().__init__(f"{layer} is unavailable: {reason}")
        self.layer = layer
        self.reason = reason


# The only signals a worker may send itself: the probe (0) and those whose default action
# is to do nothing or to continue. Any other, a fatal or stopping one above all, would let
# guest code choose how its worker dies (a kill that looks like it came from outside).
HARMLESS_SIGNALS: Final = (0, platform.SIGCHLD, platform.SIGCONT, platform.SIGURG, platform.SIGWINCH)


class _SockFilter(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32))


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


class _RulesetAttr(ctypes.Structure):
    # Only the fields this module sets; the kernel accepts a shorter struct from older
    # callers, and on kernels before ABI 4 handled_access_net stays zero, which they accept.
    _fields_ = (("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64))


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the UAPI struct is __attribute__((packed)): 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_libc = ctypes.CDLL(None, use_errno=True)
if platform.SYSTEM == "Linux":  # elsewhere these symbols are missing or differ; every layer raises
    _libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    _libc.prctl.restype = ctypes.c_int
    _libc.syscall.restype = ctypes.c_long
    _libc.unshare.argtypes = (ctypes.c_int,)
    _libc.unshare.restype = ctypes.c_int
    _libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
    _libc.mount.restype = ctypes.c_int


def _errno_reason(what: str) -> str:
    code = ctypes.get_errno()
    return f"{what} failed: {errno.errorcode.get(code, str(code))} ({os.strerror(code)})"


def _require_x86_64(layer: str) -> None:
    system, machine = platform.SYSTEM, platform.MACHINE
    if system != "Linux" or machine != "x86_64":
        raise LayerUnavailable(layer, f"only Linux x86_64 is supported here, not {system} {machine}")


def _require_linux(layer: str) -> None:
    if platform.SYSTEM != "Linux":
        raise LayerUnavailable(layer, f"needs Linux, not {platform.SYSTEM}")


def _prctl(layer: str, option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    result: int = _libc.prctl(option, arg2, arg3, arg4, arg5)
    if result < 0:
        raise LayerUnavailable(layer, _errno_reason(f"prctl({option})"))
    return result


def _syscall(name: str, *args: int) -> int:
    result: int = _libc.syscall(ctypes.c_long(SYSCALLS[name]), *(ctypes.c_long(a) for a in args))
    return result


# --- 1. parent-death signal -------------------------------------------------------------------


def set_parent_death_signal(expected_parent: int) -> None:
    """SIGKILL this process when its parent thread exits.

    The parent may already have died before prctl ran, in which case no signal will ever come:
    the getppid() check after arming catches that window.
    The kernel clears the setting on any uid/gid change, so :func:`drop_privileges` re-arms it.
    """
    layer = "parent-death signal"
    _require_linux(layer)
    _prctl(layer, PR_SET_PDEATHSIG, platform.SIGKILL)
    if os.getppid() != expected_parent:
        raise LayerUnavailable(layer, f"parent {expected_parent} already exited (now {os.getppid()})")


# --- 2. no_new_privs --------------------------------------------------------------------------


def set_no_new_privs() -> None:
    """Forbid gaining privileges through exec (setuid bits, file capabilities); irreversible."""
    _require_linux("no_new_privs")
    _prctl("no_new_privs", PR_SET_NO_NEW_PRIVS, 1)


# --- 3. namespaces ----------------------------------------------------------------------------


def _write_proc_self(name: str, text: str) -> None:
    with open(f"/proc/self/{name}", "wb") as handle:
        handle.write(text.encode())


def unshare_namespaces() -> None:
    """Move into fresh network, IPC, UTS and mount namespaces and make all mounts private.

    The new network namespace has only a downed loopback, so no network at all. Without root,
    a user namespace mapping only our own uid/gid comes first to grant the right to do so.
    """
    layer = "namespaces"
    _require_linux(layer)
    if os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
        if _libc.unshare(CLONE_NEWUSER) != 0:
            raise LayerUnavailable(layer, _errno_reason("unshare(CLONE_NEWUSER)"))
        # A process that dropped root (setuid) is left non-dumpable, which makes its own
        # /proc/self files root-owned and the id maps unwritable: lift that just for the writes.
        dumpable = _prctl(layer, PR_GET_DUMPABLE)
        if not dumpable:
            _prctl(layer, PR_SET_DUMPABLE, 1)
        try:
            _write_proc_self("uid_map", f"{uid} {uid} 1\n")
            # An unprivileged process may write gid_map only once setgroups is denied.
            _write_proc_self("setgroups", "deny")
            _write_proc_self("gid_map", f"{gid} {gid} 1\n")
        except OSError as exc:
            raise LayerUnavailable(layer, f"writing the id maps failed: {errno.errorcode.get(exc.errno or 0)}") from exc
        finally:
            if not dumpable:
                _prctl(layer, PR_SET_DUMPABLE, 0)
    if _libc.unshare(NAMESPACES) != 0:
        raise LayerUnavailable(layer, _errno_reason("unshare(NET|IPC|UTS|NS)"))
    # A new mount namespace starts as a copy whose mounts may still share propagation with the
    # host's; making the tree private stops any mount made here from leaking out (and back in).
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise LayerUnavailable(layer, _errno_reason("mount(/, MS_REC|MS_PRIVATE)"))


# --- 4. privilege drop ------------------------------------------------------------------------


def _capabilities() -> dict[str, int]:
    status = platform.proc_status()
    return {key: int(status[key], 16) for key in ("CapEff", "CapPrm") if key in status}


def drop_privileges(uid: int = 65534, gid: int = 65534) -> None:
    """Become ``uid``/``gid`` (nobody by default) with no supplementary groups, if root.

    Does nothing when not running as root: there is nothing to drop. Afterwards the process
    must hold no effective or permitted capabilities and must not be able to become root again.
    """
    layer = "privilege drop"
    if os.geteuid() != 0:
        return
    parent = os.getppid()
    death_signal = ctypes.c_int(0)
    _prctl(layer, PR_GET_PDEATHSIG, ctypes.addressof(death_signal))
    try:
        os.setgroups([])
        os.setgid(gid)  # before setuid: once uid is not 0 we may no longer change gid
        os.setuid(uid)
    except OSError as exc:
        raise LayerUnavailable(layer, f"setuid/setgid failed: {errno.errorcode.get(exc.errno or 0)}") from exc
    # Changing credentials clears the parent-death signal; arm it again if it was set.
    if death_signal.value:
        set_parent_death_signal(parent)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise LayerUnavailable(layer, f"ids are {os.getresuid()}/{os.getresgid()} after the drop")
    caps = _capabilities()
    if caps.get("CapEff", -1) != 0 or caps.get("CapPrm", -1) != 0:
        raise LayerUnavailable(layer, f"capabilities remain after the drop: {caps}")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise LayerUnavailable(layer, "setuid(0) succeeded after the drop")


# --- 5. Landlock ------------------------------------------------------------------------------


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, or raise LayerUnavailable. Applies nothing."""
    layer = "landlock"
    _require_x86_64(layer)
    version = _syscall("landlock_create_ruleset", 0, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if version < 0:
        raise LayerUnavailable(layer, _errno_reason("landlock_create_ruleset(VERSION)"))
    return version


def _handled_fs(abi: int) -> int:
    rights = FS_ABI1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def restrict_filesystem(
    read_paths: Iterable[str],
    execute_paths: Iterable[str] = (),
    write_paths: Iterable[str] = (),
) -> None:
    """Landlock: afterwards only these paths are reachable, and TCP bind/connect is refused.

    ``read_paths`` may be read (files) and listed (directories); ``execute_paths`` may be read
    and executed; ``write_paths`` get every right the ABI knows. Missing paths are skipped.
    Every right the running ABI knows is handled, so anything not granted here is denied.
    Needs no_new_privs (or CAP_SYS_ADMIN) already set.
    """
    layer = "landlock"
    abi = landlock_abi()
    handled_fs = _handled_fs(abi)
    # ABI 4 added TCP rights; handling them with no rule leaves no TCP at all.
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    attr = _RulesetAttr(handled_access_fs=handled_fs, handled_access_net=handled_net)
    ruleset = _syscall("landlock_create_ruleset", ctypes.addressof(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        raise LayerUnavailable(layer, _errno_reason("landlock_create_ruleset"))
    try:
        grants: list[tuple[str, int]] = [(p, FS_READ_FILE | FS_READ_DIR) for p in read_paths]
        grants += [(p, FS_READ_FILE | FS_EXECUTE) for p in execute_paths]
        grants += [(p, handled_fs) for p in write_paths]
        for path, rights in grants:
            _add_path_rule(ruleset, path, rights & handled_fs)
        if _syscall("landlock_restrict_self", ruleset, 0) != 0:
            raise LayerUnavailable(layer, _errno_reason("landlock_restrict_self"))
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # the opened inode, not the name again
            rights &= FS_FILE_RIGHTS  # directory rights on a file rule are EINVAL
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        if _syscall("landlock_add_rule", ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.addressof(rule), 0) != 0:
            raise LayerUnavailable("landlock", _errno_reason(f"landlock_add_rule({path})"))
    finally:
        os.close(fd)


# --- 6. seccomp -------------------------------------------------------------------------------

_Insn = tuple[int, int | str, int | str, int]


def _assemble(program: Sequence[_Insn | str]) -> list[tuple[int, int, int, int]]:
    """Resolve string jump targets (labels, given as bare strings in ``program``) to offsets."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)

    def offset(target: int | str, here: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - here - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"BPF jump to {target} out of range")
        return jump

    return [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(insns)]


# Placeholders for what only the confined process knows (its pid, the address of the filename
# it will execve): no real operand is negative, so the template cannot mistake one for them.
_PID: Final = -1
_NEGATED_PID: Final = -2
_EXEC_LOW: Final = -3
_EXEC_HIGH: Final = -4
_templates: dict[bool, list[tuple[int, int, int, int]]] = {}


def prepare() -> None:
    """Build ahead what every confinement would otherwise build: a process that forks confined
    children (the launcher's serve mode) calls this once, before its first fork."""
    for exec_allowed in (False, True):
        _seccomp_template(exec_allowed)


def _seccomp_template(exec_allowed: bool) -> list[tuple[int, int, int, int]]:
    template = _templates.get(exec_allowed)
    if template is None:
        template = _templates[exec_allowed] = _assemble(_seccomp_source(exec_allowed))
    return template


def _seccomp_program(pid: int, exec_pointer: int | None) -> list[_SockFilter]:
    u32 = 0xFFFFFFFF
    values = {_PID: pid, _NEGATED_PID: -pid & u32}
    if exec_pointer is not None:
        values.update({_EXEC_LOW: exec_pointer & u32, _EXEC_HIGH: exec_pointer >> 32})
    template = _seccomp_template(exec_pointer is not None)
    return [_SockFilter(code, jt, jf, values.get(k, k)) for code, jt, jf, k in template]


def _seccomp_source(exec_allowed: bool) -> list[_Insn | str]:
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    program: list[_Insn | str] = [
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARCH),
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, SECCOMP_NR),
        (BPF_JGE_K, "enosys", 0, X32_SYSCALL_BIT),
        # clone3 takes its flags in a struct behind a pointer, which BPF cannot read: refuse it
        # with ENOSYS, which makes glibc (and Rust's std) fall back to clone, checked below.
        (BPF_JEQ_K, "enosys", 0, SYSCALLS["clone3"]),
    ]
    program += [(BPF_JEQ_K, "eperm", 0, SYSCALLS[name]) for name in DENIED_SYSCALLS]
    program += [
        (BPF_JEQ_K, "socket", 0, SYSCALLS["socket"]),
        (BPF_JEQ_K, "socket", 0, SYSCALLS["socketpair"]),
        (BPF_JEQ_K, "clone", 0, SYSCALLS["clone"]),
        (BPF_JEQ_K, "execve", 0, SYSCALLS["execve"]),
        (BPF_JEQ_K, "kill", 0, SYSCALLS["kill"]),
        (BPF_JEQ_K, "self, signal in arg 2", 0, SYSCALLS["tgkill"]),
        (BPF_JEQ_K, "self, signal in arg 1", 0, SYSCALLS["rt_sigqueueinfo"]),
        (BPF_JEQ_K, "self, signal in arg 2", 0, SYSCALLS["rt_tgsigqueueinfo"]),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        # The kernel reads socket's domain, clone's flags and a pid as ints (clone's through
        # lower_32_bits()), so the low word of args[0] is all that counts for each of them.
        "socket",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
        (BPF_JEQ_K, "allow", "eperm", AF_UNIX),
        "clone",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
        (BPF_JSET_K, "eperm", 0, CLONE_NEW_ANY),
        (BPF_JSET_K, "allow", "eperm", CLONE_THREAD),
        # kill(pid | 0 | -pid): the worker itself or its own process group (it leads a new
        # session), never the host or a sibling.
        "kill",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
        (BPF_JEQ_K, "signal in arg 1", 0, _PID),
        (BPF_JEQ_K, "signal in arg 1", 0, 0),
        (BPF_JEQ_K, "signal in arg 1", "eperm", _NEGATED_PID),
        "self, signal in arg 1",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
        (BPF_JEQ_K, "signal in arg 1", "eperm", _PID),
        "self, signal in arg 2",
        (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
        (BPF_JEQ_K, "signal in arg 2", "eperm", _PID),
        # The kernel reads the signal number as an int: the low word is all that counts.
        *_only_harmless_signals("signal in arg 1", SECCOMP_ARG1_LOW, eperm),
        *_only_harmless_signals("signal in arg 2", SECCOMP_ARG2_LOW, eperm),
        "execve",
    ]
    if not exec_allowed:
        program += [(BPF_RET_K, 0, 0, eperm)]
    else:
        # The one execve allowed is the launcher's: its filename at the address it passed. The
        # pointer is a full 64-bit value, compared a word at a time.
        program += [
            (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_LOW),
            (BPF_JEQ_K, 0, "eperm", _EXEC_LOW),
            (BPF_LD_W_ABS, 0, 0, SECCOMP_ARG0_HIGH),
            (BPF_JEQ_K, "allow", "eperm", _EXEC_HIGH),
        ]
    program += [
        "allow",
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        "eperm",
        (BPF_RET_K, 0, 0, eperm),
        "enosys",
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
    ]
    return program


def _only_harmless_signals(label: str, offset: int, refusal: int) -> list[_Insn | str]:
    """Allow the call only if the signal number at ``offset`` is one of HARMLESS_SIGNALS."""
    return [
        label,
        (BPF_LD_W_ABS, 0, 0, offset),
        *((BPF_JEQ_K, "allow", 0, number) for number in HARMLESS_SIGNALS),
        (BPF_RET_K, 0, 0, refusal),
    ]


def install_seccomp_filter(*, exec_pointer: int | None = None) -> None:
    """Install the syscall filter: EPERM for the kernel-attack surface, for starting processes
    and for signalling anything but this process; allow everything else.

    ``exec_pointer``, if given, is the address of the one filename execve may still be called
    with (see :func:`exec_confined`); otherwise execve is refused too. Needs no_new_privs (or
    CAP_SYS_ADMIN). Any syscall from a non-x86_64 ABI kills the process.
    """
    layer = "seccomp"
    _require_x86_64(layer)
    insns = _seccomp_program(os.getpid(), exec_pointer)
    array = (_SockFilter * len(insns))(*insns)
    prog = _SockFprog(len(insns), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    _prctl(layer, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog))


def process_breaches(host: int | None = None) -> list[str]:
    """What this process may still do to start another program or to signal one, tried for
    real: a fork (its child exits at once and is reaped), an execve of a name that exists
    nowhere, which the filter refuses with EPERM before the kernel looks the name up, and a
    null signal (kill(2) with 0, which only checks) to ``host`` and to this process's parent
    where that is another. Run after the seccomp filter, the privilege drop and Landlock,
    right before the one execve they allow: deno keeps its pid, its parent and all of these,
    so what gets through here gets through in the worker."""
    found = []
    try:
        pid = os.fork()
    except OSError:
        pass
    else:
        if pid == 0:  # pragma: no cover - the child of a probe that got through
            os._exit(0)
        os.waitpid(pid, 0)
        found.append("started a process")
    nothing = (ctypes.c_char_p * 1)(None)
    _libc.execve(b"", nothing, nothing)
    if ctypes.get_errno() != errno.EPERM:
        found.append("ran execve for another program")
    if host is not None:
        parent = os.getppid()
        for who, target in [("the host", host), *([("its parent", parent)] if parent != host else [])]:
            try:
                os.kill(target, 0)
            except OSError:
                continue
            found.append(f"signalled {who} (pid {target})")
    return found


def reach_breaches(targets: Mapping[str, Any]) -> list[str]:
    """What this process may still read, list, create or reach of what ``targets`` names
    (``selftest_targets`` in spec.py), tried for real: each file in "read" opened and
    read, each directory in "list" listed, a new file created (and removed again) in each of
    "write", a TCP socket bound and listening on 127.0.0.1, and a connection to 127.0.0.1 on
    "port", where a refusal counts too (a packet reached a live network stack). Run where
    :func:`process_breaches` runs, under every layer deno inherits: what gets through here
    gets through in the worker."""
    found = []
    for path in targets["read"]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.read(fd, 1)
        except OSError:
            pass
        finally:
            os.close(fd)
        found.append(f"read {path}")
    for path in targets["list"]:
        try:
            os.listdir(path)
        except OSError:
            continue
        found.append(f"listed {path}")
    for directory in targets["write"]:
        path = f"{directory}/.pydeno-selftest-{os.urandom(8).hex()}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        os.close(fd)
        try:  # noqa: SIM105 - contextlib would be one more import at every launch
            os.unlink(path)
        except OSError:
            pass  # reported as created either way
        found.append(f"created {path}")
    found += _network_breaches(int(targets["port"]))
    return found


def _network_breaches(port: int) -> list[str]:
    found = []
    try:
        server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    except OSError:
        pass
    else:
        try:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            found.append("listened on 127.0.0.1")
        except OSError:
            pass
        finally:
            server.close()
    try:
        client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    except OSError:
        return found
    # A loopback connection is answered at once, accepted or refused; a stack that drops it
    # still took the packet.
    client.settimeout(1.0)
    try:
        client.connect(("127.0.0.1", port))
        found.append(f"connected to 127.0.0.1:{port}")
    except ConnectionRefusedError:
        found.append(f"reached 127.0.0.1:{port} (refused)")
    except TimeoutError:
        found.append(f"reached 127.0.0.1:{port} (no answer)")
    except OSError:
        pass
    finally:
        client.close()
    return found


def exec_confined(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    seccomp: bool = True,
    argv0: str | None = None,
    report: Callable[[str], object] | None = None,
    host: int | None = None,
    targets: Mapping[str, Any] | None = None,
) -> None:
    """Install the seccomp filter (unless ``seccomp`` is false) and execve ``argv[0]``, which
    the new program sees as its argv[0] unless ``argv0`` names another. ``report``, if given,
    gets each of :func:`process_breaches` (signalling ``host`` among them) and, with
    ``targets``, of :func:`reach_breaches` first, filter or not.

    Returns only if execve fails, raising OSError. :func:`ready_to_exec` is the same in two
    steps: everything but the execve first, the arguments and the environment later."""
    ready_to_exec(argv[0], seccomp=seccomp, report=report, host=host, targets=targets)(argv[1:], env, argv0)


def ready_to_exec(
    program: str,
    *,
    seccomp: bool = True,
    report: Callable[[str], object] | None = None,
    host: int | None = None,
    targets: Mapping[str, Any] | None = None,
) -> Callable[[Sequence[str], dict[str, str], str | None], None]:
    """Install the seccomp filter (unless ``seccomp`` is false) and run the self-test's probes
    (see :func:`exec_confined`); return what execs ``program`` with its arguments (after
    argv[0]), its environment and the argv[0] it sees (None: ``program``). That raises OSError
    if execve fails.

    The filename is a buffer whose address the filter allows, so that execve passes and any
    later one (from deno, in the same address space's successor) is refused."""
    path = ctypes.create_string_buffer(os.fsencode(program))
    if seccomp:
        install_seccomp_filter(exec_pointer=ctypes.addressof(path))
    if report is not None:
        for what in [*process_breaches(host), *(reach_breaches(targets) if targets is not None else [])]:
            report(what)

    def execute(args: Sequence[str], env: dict[str, str], argv0: str | None = None) -> None:
        shown = [program if argv0 is None else argv0, *args]
        argv = (ctypes.c_char_p * (len(shown) + 1))(*[os.fsencode(a) for a in shown], None)
        envp = (ctypes.c_char_p * (len(env) + 1))(*[os.fsencode(f"{k}={v}") for k, v in env.items()], None)
        _libc.execve(path, argv, envp)
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), program)

    return execute


# Keep struct packing honest: a wrong layout would hand the kernel garbage silently.
assert ctypes.sizeof(_PathBeneathAttr) == 12
assert ctypes.sizeof(_SockFilter) == 8
