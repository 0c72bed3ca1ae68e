"""The x86_64 Linux ABI the confinement layers speak: syscall numbers (the one table), the
syscalls a worker is denied, and the constants and struct offsets of the kernel's UAPI headers."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


# --- x86_64 syscall numbers: the one table (asm/unistd_64.h) ---------------------------------

SYSCALLS: Final[dict[str, int]] = {
    "socket": 41,
    "socketpair": 53,
    "clone": 56,
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "kill": 62,
    "ptrace": 101,
    "rt_sigqueueinfo": 129,
    "pivot_root": 155,
    "chroot": 161,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "tkill": 200,
    "tgkill": 234,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "rt_tgsigqueueinfo": 297,
    "perf_event_open": 298,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "execveat": 322,
    "userfaultfd": 323,
    "pidfd_send_signal": 424,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_open": 434,
    "clone3": 435,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
}

# Refused outright with EPERM. The new mount API (open_tree .. mount_setattr) is listed with
# mount/umount2 because it reaches the same mount table by another door.
DENIED_SYSCALLS: Final = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "pivot_root",
    "chroot",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "unshare",
    "setns",
    "userfaultfd",
    "open_by_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "quotactl_fd",
    # A worker starts no process: threads come from clone with CLONE_THREAD (checked below),
    # and the only execve allowed is the launcher's own, of deno.
    "fork",
    "vfork",
    "execveat",
    # Signals reach only the worker itself (checked below); these address other processes
    # or threads by number or descriptor with no way to tell which.
    "tkill",
    "pidfd_send_signal",
    "pidfd_open",
    "pidfd_getfd",
)

# --- constants from the kernel UAPI headers ---------------------------------------------------

PR_SET_PDEATHSIG: Final = 1
PR_GET_PDEATHSIG: Final = 2
PR_GET_DUMPABLE: Final = 3
PR_SET_DUMPABLE: Final = 4
PR_GET_SECCOMP: Final = 21
PR_SET_SECCOMP: Final = 22
PR_SET_NO_NEW_PRIVS: Final = 38

CLONE_THREAD: Final = 0x00010000
CLONE_NEWNS: Final = 0x00020000
CLONE_NEWCGROUP: Final = 0x02000000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000
CLONE_NEW_ANY: Final = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)
NAMESPACES: Final = CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNS

MS_REC: Final = 0x4000
MS_PRIVATE: Final = 1 << 18

LANDLOCK_CREATE_RULESET_VERSION: Final = 1
LANDLOCK_RULE_PATH_BENEATH: Final = 1
FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_REMOVE_DIR: Final = 1 << 4
FS_REMOVE_FILE: Final = 1 << 5
FS_MAKE_CHAR: Final = 1 << 6
FS_MAKE_DIR: Final = 1 << 7
FS_MAKE_REG: Final = 1 << 8
FS_MAKE_SOCK: Final = 1 << 9
FS_MAKE_FIFO: Final = 1 << 10
FS_MAKE_BLOCK: Final = 1 << 11
FS_MAKE_SYM: Final = 1 << 12
FS_REFER: Final = 1 << 13  # ABI 2
FS_TRUNCATE: Final = 1 << 14  # ABI 3
FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
NET_BIND_TCP: Final = 1 << 0  # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
FS_ABI1: Final = (1 << 13) - 1
# Rights that make sense on a regular file; a path-beneath rule on a file with any other
# right is EINVAL.
FS_FILE_RIGHTS: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
FS_WRITE_RIGHTS: Final = (FS_ABI1 & ~(FS_EXECUTE | FS_READ_FILE | FS_READ_DIR)) | FS_REFER | FS_TRUNCATE

SECCOMP_MODE_FILTER: Final = 2
SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
SECCOMP_RET_ERRNO: Final = 0x00050000
SECCOMP_RET_ALLOW: Final = 0x7FFF0000
AUDIT_ARCH_X86_64: Final = 0xC000003E
# x32 syscalls arrive with the same audit arch and this bit set in the number; without a
# check, "ptrace | X32_BIT" would slip past every equality test below.
X32_SYSCALL_BIT: Final = 0x40000000
AF_UNIX: Final = 1

BPF_LD_W_ABS: Final = 0x20
BPF_JEQ_K: Final = 0x15
BPF_JGE_K: Final = 0x35
BPF_JSET_K: Final = 0x45
BPF_RET_K: Final = 0x06
# struct seccomp_data offsets: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
SECCOMP_NR: Final = 0
SECCOMP_ARCH: Final = 4
SECCOMP_ARG0_LOW: Final = 16  # little-endian: the low 32 bits of args[0] come first
SECCOMP_ARG0_HIGH: Final = 20
SECCOMP_ARG1_LOW: Final = 24
SECCOMP_ARG2_LOW: Final = 32
