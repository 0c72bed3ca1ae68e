"""What a worker is started as: its configuration, deno's command line and environment, and
for a confined worker the spec the launcher (``launcher.py``) confines it by."""

from __future__ import annotations

import functools
import json
import marshal
import os
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from ..._base.options import SandboxMode
from ..wire.protocol import DEFAULT_DECODE_RATIO, FRAME_HEADER_BYTES, SELFTEST_GRANTS, SETTINGS_VARIABLE
from . import platform
from .launcher import WORKER_FILES_FD
from .staging import (
    SERVE_BY_DESCRIPTOR,
    Staged,
    deno_environment,
    runnable_deno,
    stage,
    staged,
    warm_confined,
    worker_entry,
)

__all__ = [
    "LAUNCHER",
    "SELFTEST_PORT",
    "Command",
    "DENO_ARGV0",
    "Confined",
    "Unconfined",
    "WorkerConfig",
    "confined",
    "launcher_command",
    "selftest_environment",
    "selftest_targets",
    "watcher_memory_cap",
    "worker_command",
    "worker_environment",
]

# The port the self-test tries to connect to on 127.0.0.1: reaching it, or being refused by
# a live network stack, is a breach; only a refusal to create or route the socket is not.
SELFTEST_PORT: Final = 9
LAUNCHER: Final = Path(__file__).resolve().with_name("launcher.py")
# deno's argv[0], whatever file it runs from: the guest reads it back (node:process's argv0),
# and the binary's path would name the host's virtualenv, or the staging directory with the
# temporary directory and the host's user id in it. The worker makes Deno.execPath() say the
# same (worker/main.ts, guardWorkers).
DENO_ARGV0: Final = "deno"
MiB: Final = 1 << 20


# The young generation a worker starts with, per semi-space, in MiB. At V8's default (1 MiB),
# what deno's start-up and the worker's modules allocate fills it once, and the scavenge that
# follows (copying nearly all of it, since start-up objects live on) lands between the
# worker's hello and its first command: a millisecond or more of every cold start. At 2 MiB
# the start fits; the space still only takes memory as it is filled.
YOUNG_SEMI_SPACE_MIB: Final = 2
# How far a worker's RSS may grow past its low point after a collection before it asks for
# the next one (the worker's "memory over a long life"). A collection shrinks the young
# generation to its least, and both its semi-spaces are filled again within a few hundred
# commands of any kind: the allowance holds that regrowth, and a MiB more. Were it smaller,
# a runtime repeating one eval would collect every few looks, for nothing, a pause of several
# milliseconds each time.
MEMORY_GROWTH_BYTES: Final = (2 * YOUNG_SEMI_SPACE_MIB + 1) * MiB
# How long the zygote's spare (a worker started ahead, launcher.py) waits for a runtime to
# take it before the zygote ends it: as long as the zygote outlives its last worker. A host
# that has stopped starting runtimes gets the spare's memory back; read at each spec made.
SPARE_IDLE_SECONDS = 30.0


class WorkerConfig(NamedTuple):
    max_memory: int | None
    max_message_bytes: int
    jitless: bool
    max_depth: int
    max_inflight_host_calls: int = 32
    max_decode_ratio: int = DEFAULT_DECODE_RATIO
    max_console_bytes: int = 1 << 20
    max_console_chars: int = 16 * 1024
    sandbox: SandboxMode = "require"
    max_threads: int | None = None
    # The worker's mailbox file (pydeno/host/process/mailbox.py); set by WorkerProcess.
    mailbox: str | None = None
    # Where the worker's cgroup of its own goes (pydeno/host/process/cgroup.py, a directory per
    # controller), whose caps the kernel enforces; with none, the zygote holds a confined worker
    # to its caps. Set by WorkerProcess.
    cgroups: tuple[str, ...] = ()

    def v8_flags(self) -> str:
        # V8 sizes its heap from the whole machine unless told; keep the old generation
        # under max_memory so a heap overrun ends in V8's OOM rather than a host kill.
        flags = []
        if self.max_memory is not None:
            flags.append(f"--max-old-space-size={max(16, (self.max_memory * 3 // 4) // MiB)}")
        if self.jitless:
            flags.append("--jitless")
        flags.append(f"--min-semi-space-size={YOUNG_SEMI_SPACE_MIB}")
        # gc() for the worker's collection over a long life (worker/main.ts, "Memory over a
        # long life"); the worker takes it off the global before any guest code runs.
        flags.append("--expose-gc")
        # V8 compiles without source positions and, at the first stack trace taken, compiles
        # again every function on the stack to find them: the first error a worker makes (its
        # start-up's check that the mailbox's grant is gone) re-parsed the whole worker program,
        # a sixth of a cold start. Positions taken at the first compile cost little.
        flags.append("--no-enable-lazy-source-positions")
        return ",".join(flags)

    def settings(self) -> bytes:
        """The settings frame (WORKER_SETTINGS), the first the host writes to the worker's
        stdin: its limits and the mailbox."""
        body = json.dumps(
            {
                "max_message_bytes": self.max_message_bytes,
                "max_depth": self.max_depth,
                "max_decode_ratio": self.max_decode_ratio,
                "max_console_chars": self.max_console_chars,
                "max_inflight_host_calls": self.max_inflight_host_calls,
                "max_console_bytes": self.max_console_bytes,
                "memory_growth": MEMORY_GROWTH_BYTES,
                "mailbox": self.mailbox,
            }
        ).encode()
        return len(body).to_bytes(FRAME_HEADER_BYTES, "big") + body

    @staticmethod
    def environment(cache: Path, selftest: dict[str, Any] | None = None) -> dict[str, str]:
        """The worker's whole environment: deno's, and the start settings (START_SETTINGS),
        the same for every worker of one staging."""
        return {**deno_environment(cache), SETTINGS_VARIABLE: json.dumps({"selftest": selftest})}

    def argv(self, deno: str, entry: Path, selftest: dict[str, Any] | None = None) -> list[str]:
        """deno's command line. With ``selftest`` (what the worker's part of the sandbox
        self-test probes: its environment), deno may read all of its environment, so that the
        probe sees what the OS handed it; otherwise only the start settings. The mailboxes'
        directory is readable too, not this worker's mailbox alone: the command line is the
        same for every worker of one staging and memory limit, so that the zygote can start
        one ahead of its request, before the mailbox exists. The worker revokes every grant
        before it reports ready, and before it runs anything it is sent."""
        grants = [f"--allow-{name}" for name in SELFTEST_GRANTS] if selftest else [f"--allow-env={SETTINGS_VARIABLE}"]
        if self.mailbox:
            grants.append(f"--allow-read={os.path.dirname(self.mailbox)}")
        return [
            deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--no-remote",
            "--no-npm",
            # Deno's V8 code cache (a SQLite file in the cache directory) serves evalContext
            # too: every eval hashed its source and queried the file, and every eval of new
            # code had its script serialized to be stored there. Where the worker may write
            # (sandbox="off") each one was written, a disk write per eval of a guest's code into
            # a file every runtime of this user shares, and each Web Worker's blob: or data:
            # module added a row for good; elsewhere the write failed after the serializing.
            # The worker's own modules compile from source instead, a one-time cost.
            "--no-code-cache",
            # Without it, a Worker given deno.permissions (which may only narrow what the
            # code that starts it has) ends the whole process instead of the constructor call.
            "--unstable-worker-options",
            *grants,
            *([f"--v8-flags={flags}"] if (flags := self.v8_flags()) else []),
            str(entry),
        ]


def selftest_targets(cache: Path, worker_dir: str) -> dict[str, Any]:
    """What the launcher's self-test tries to reach, right before deno's execve, under every
    layer deno inherits (reach_breaches in layers.py): host files and directories (among
    them this very module's), the temporary directory, the transpile cache and the worker's
    own files for writing, and 127.0.0.1. It also tries to start a process and to signal the
    host and the worker's parent (process_breaches). In deno, the first use of each of these
    APIs alone costs a millisecond or more of every start, and each would need deno to start
    with broad grants."""
    module, executable = _host_files()
    return {
        "read": ["/etc/passwd", module, executable],
        "list": ["/", os.path.dirname(module)],
        "write": [tempfile.gettempdir(), str(cache), worker_dir],
        "port": SELFTEST_PORT,
    }


@functools.cache
def _host_files() -> tuple[str, str]:
    """This module's file and the host's interpreter, resolved once: every start's self-test
    names them, and neither moves while the process runs."""
    return os.path.realpath(__file__), os.path.realpath(sys.executable)


def selftest_environment(cache: Path) -> dict[str, Any]:
    """The worker's own part of the self-test: the exact environment it should see, which
    only deno can tell (deno itself adds the last two, pointing PATH at its node shims inside
    the cache)."""
    return {"env": {**deno_environment(cache), "PATH": f"{cache}/node_compat_bin", "DENO_NODE_SHIM_ACTIVE": "1"}}


def launcher_command(launcher: Path, *args: str) -> list[str]:
    """The command line that runs the launcher program with args."""
    return [platform.interpreter(), "-I", "-S", str(launcher), *args]


class Confined(NamedTuple):
    """A worker the launcher starts: the spec it confines the worker by (see launcher.py)."""

    spec: dict[str, Any]

    def command(self, launcher: Path = LAUNCHER) -> list[str]:
        """The one-off launcher's command line, for when no zygote can serve."""
        return launcher_command(launcher, marshal.dumps(self.spec).hex())


class Unconfined(NamedTuple):
    """deno started directly (``sandbox="off"``), with DENO_ARGV0 in place of the binary's
    path, and with a descriptor for ``staged.base`` to read the worker's files through."""

    config: WorkerConfig
    staged: Staged

    def argv(self, fd: int) -> list[str]:
        """deno's command line, reading the worker's files through descriptor fd (-1: none)."""
        return self.config.argv(self.staged.deno, self.staged.served(fd))


# A worker's command: any command line (hostile fake workers), deno started directly, or a
# confined worker for the launcher.
Command = list[str] | Unconfined | Confined


def confined(
    config: WorkerConfig,
    entry: Path | None = None,
    *,
    warm: Callable[[], None] | None = None,
    missing_layers: Mapping[str, str] | None = None,
    silent_layers: Collection[str] = (),
) -> Confined:
    """The worker behind the sandbox launcher (pydeno/host/process/launcher.py).

    What Landlock leaves readable: the C library directories, the worker's files, its warm
    transpile cache and its own /proc entry; deno and the ELF loader may also be executed.
    Nothing is writable. The launcher's self-test probes :func:`selftest_targets`, the
    worker's :func:`selftest_environment`.

    ``warm`` runs once deno is known to be runnable, before it is staged: the zygote starts
    (once per process) while this thread stages deno (the first time, a `deno cache` run):
    the two take about as long, and neither needs the other. ``missing_layers`` ({layer:
    reason}) are layers the launcher treats as refused by the kernel, and ``silent_layers``
    layers it skips without reporting them, as a kernel that accepts a layer without
    enforcing it would: a simulated kernel, for tests; the self-test must catch what the
    silent ones let through.
    """
    deno = runnable_deno()
    if warm is not None:
        warm()
    found = stage(deno, entry if entry is not None else worker_entry())
    warm_confined(found)
    deno, entry, cache = found.deno, found.entry, found.cache
    worker_dir = _resolved(entry.parent)
    own = selftest_environment(cache)
    return Confined(
        {
            "parent": os.getpid(),
            # The host, for the launcher's signal probe: "parent" is the zygote in a zygote's
            # child.
            "host": os.getpid(),
            # What the launcher's self-test probes, the rest of what the worker's does.
            "selftest": selftest_targets(cache, worker_dir),
            "mode": config.sandbox,
            # /proc/self: deno reads its own memory map; only the worker's own entries.
            "read": [*platform.library_dirs(), worker_dir, str(cache), "/proc/self"],
            "execute": [deno, platform.elf_interpreter()],
            "env": config.environment(cache, own),
            # Without a cgroup of its own, the zygote holds the worker to its caps.
            "memory_cap": None if config.cgroups else watcher_memory_cap(config.max_memory),
            "thread_cap": None if config.cgroups else config.max_threads,
            # Where the zygote makes a cgroup for a spare it starts for this spec.
            "cgroups": list(config.cgroups),
            "spare_idle": SPARE_IDLE_SECONDS,
            # The launcher opens the base as WORKER_FILES_FD for deno to read the worker's
            # files from.
            "argv": config.argv(deno, found.served(WORKER_FILES_FD), own),
            "argv0": DENO_ARGV0,
            "files": str(found.base) if SERVE_BY_DESCRIPTOR else None,
            "simulate": dict(missing_layers or {}),
            "silent": sorted(silent_layers),
        }
    )


@functools.lru_cache(maxsize=16)
def _resolved(folder: Path) -> str:
    """A staged worker's folder, resolved: its name is its contents' hash, and the staging
    base it is in is this user's own, so where it resolves to holds for the process's life."""
    return str(folder.resolve())


def watcher_memory_cap(max_memory: int | None) -> int | None:
    """The resident size the zygote kills a worker over (where it has no cgroup): above
    max_memory, where the host's monitor kills and reports, by less than the worker can add
    in a sample period, so that it ends within max_memory + 64 MiB (or + 25%)."""
    if max_memory is None:
        return None
    return max_memory + max(16 * MiB, max_memory // 10)


def worker_command(
    config: WorkerConfig,
    entry: Path | None = None,
    *,
    warm: Callable[[], None] | None = None,
    missing_layers: Mapping[str, str] | None = None,
    silent_layers: Collection[str] = (),
) -> Command:
    """What starts a worker from entry (None: the installed worker): deno itself under
    sandbox="off", else a confined worker for the launcher (see :func:`confined` for the rest)."""
    if config.sandbox == "off":
        return Unconfined(config, staged(entry))
    return confined(config, entry, warm=warm, missing_layers=missing_layers, silent_layers=silent_layers)


def worker_environment(config: WorkerConfig, entry: Path | None = None) -> dict[str, str]:
    """The environment the worker process starts with: nothing of the host's. With no OS
    layers it is WorkerConfig.environment(); the launcher sets that itself, after the layers."""
    if config.sandbox != "off":
        return {}
    return config.environment(staged(entry).cache)
