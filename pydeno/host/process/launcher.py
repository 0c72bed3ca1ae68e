"""The sandbox launcher: applies the OS layers to itself, then becomes deno.

Run as ``python -I -S pydeno/host/process/launcher.py SPEC`` where SPEC is a hex-encoded
:mod:`marshal` of::

    {"parent": <host pid>, "mode": "require" | "best_effort", "read": [...], "execute": [...],
     "env": {...}, "argv": [deno, ...], "argv0": <what deno's argv[0] says>,
     "files": <the staging directory, opened as WORKER_FILES_FD for deno> | None,
     "simulate": {<layer>: <reason>}, "silent": [<layer>],
     "memory_cap": <bytes> | None, "thread_cap": <count> | None (the zygote's, below),
     "cgroups": [<a parent directory per controller of the worker's own cgroup>] (the
     zygote makes a spare's group under each), "spare_idle": <seconds a spare waits for a
     request; absent or 0: the zygote starts none>}

It is a separate program, not ``preexec_fn``: the host is threaded, and running Python
between fork and exec in a threaded process can deadlock. Here the process is a fresh,
single-threaded interpreter, and ``execve`` replaces it with deno, keeping the pid, so the
host supervises the very process it started. Marshal, not JSON: the same interpreter writes
and reads it, and the json module's imports alone would add milliseconds to every start.

Order matters. The parent-death signal first, so that from here on a dead host means a dead
worker. Namespaces next, while still root. Then drop privileges (which re-arms the
parent-death signal the kernel clears on a uid change), ``no_new_privs``, Landlock, and the
seccomp filter last, as it also refuses the syscalls the earlier layers need, and every
execve but the one that starts deno.

Under ``"require"`` a layer the kernel refuses ends the launcher: it prints
``pydeno-launcher: <layer> is unavailable: <why>`` to stderr and exits with EXIT_UNAVAILABLE;
the host turns that into its own message. Under ``"best_effort"`` it prints
``pydeno-launcher: skipped: <layer> is unavailable: <why>`` and goes on. ``simulate`` names
layers to treat as refused and ``silent`` layers to skip without a word (a kernel that accepts
a layer but does not enforce it): test switches the host sets only from a private seam.

Serve mode (the zygote): ``python -I -S launcher.py serve FD HOST`` runs one long-lived
process per host that has paid for the interpreter, the imports and what :func:`layers.prepare`
builds once. FD is its end of a ``SOCK_SEQPACKET`` socketpair with the host; each record is a
marshalled tuple:

    host -> zygote   ("spawn", SPEC)
                     ("release", pid): the host is done with that worker; reap it
    zygote -> host   ("ready", pid) once, first; or ("unavailable", why) and exit
                     ("spawned", pid, cgroup) with the worker's pidfd and the host's ends of
                     its three pipes attached (its stdin's write end, its stdout's and
                     stderr's read ends), cgroup the name of the group a spare is in (or
                     None); or ("failed", errno, text)
                     ("overlimit", pid, what, value) when it killed a worker over a cap:
                     what is "memory" (value: its resident size) or "threads" (its count)
                     ("exit", pid, returncode) when a worker ends (negative: its signal)
                     ("reaped", pid) once a released worker is reaped (killed first if
                     it was still running)
                     ("spare", pid) when it started a spare (below), ("spare gone", pid)
                     once one no request took is reaped; a spare taken is the
                     "spawned" worker of that pid

Per spawn it makes the worker's three pipes and forks (it is single-threaded, so that is
safe); the child takes its ends of them as 0, 1 and 2, starts a new session, closes
everything else and then does exactly what the one-off launcher does, its parent-death
signal aimed at the zygote (whose pid stands in for the spec's "parent"), whose own is aimed
at the host's spawner thread. Nothing in a spec differs between the workers of one staging
and memory limit but the caps (below): each worker's own settings come from the host on its
stdin (the wire's settings frame), and the worker waits for them once all the start-up it can
do without them is done. So once two requests in a row have asked for one spec, the zygote
starts a spare for it, ahead of the next request: a worker started as that spec says, layers,
self-test, deno and all, its pipes held here until a request takes it. A request for the same
spec is handed the spare as its worker, most of deno's start behind it; any other request
ends the spare and forks as before, and so does a spec's "spare_idle" passing with no
request (starts have stopped coming: it would hold a worker's memory for nothing). A spare
that fails (a layer refused, say) writes why to its own stderr and exits, and is replaced by a
fresh start that says the same. An exited worker stays a zombie until the host releases it,
so its pid (and process group) cannot be reused while the host may still signal it.

Where the host could give a worker no cgroup of its own, its spec carries a ``memory_cap``
and a ``thread_cap``: the zygote then samples that worker's resident size and thread count
every CAP_INTERVAL and kills it over either cap. The zygote is a single-threaded process of
its own, so this holds while the host's Python threads are starved (the host's GIL held);
the host's monitor, which kills at max_memory, below the memory cap, still reports first
whenever it gets to run.
"""

from __future__ import annotations

import errno
import marshal
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any, NoReturn

# The exit codes are the wire contract's, shared with the worker that runs in this process
# next; the table imports nothing, so loading it costs this interpreter one small module.
if TYPE_CHECKING or __package__:
    from ..wire.protocol import EXIT_DONE, EXIT_EXEC_FAILED, EXIT_INTERNAL, EXIT_UNAVAILABLE
    from . import platform
else:
    # Run as a program: -I keeps the package off sys.path, and the modules it needs (platform,
    # layers, the wire's table) need nothing but the standard library. pydeno/host goes on the
    # path and they are imported as the packages ``process`` and ``wire``, not as bare modules:
    # platform.py and mailbox.py would shadow the standard library's modules of those names.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from process import platform
    from wire.protocol import EXIT_DONE, EXIT_EXEC_FAILED, EXIT_INTERNAL, EXIT_UNAVAILABLE
PREFIX = "pydeno-launcher: "
SKIPPED = PREFIX + "skipped: "
# What the launcher's self-test probes got through (files, the network, processes and
# signals, tried right before deno's execve, under every layer deno inherits); the worker's
# own self-test covers what only deno sees, its environment.
SELFTEST = PREFIX + "self-test: "
# The largest request the zygote accepts: a spec is a few KiB.
MAX_REQUEST = 1 << 20
# How often the zygote samples the workers it holds to a memory cap, in seconds.
CAP_INTERVAL = 0.02
# The descriptor deno reads the worker's files through (/proc/self/fd/3/...): a fixed number,
# so that the URLs of those files, and the transpile cache entries warmed for them, are the
# same for every worker.
WORKER_FILES_FD = 3
# A spare's cgroup, under each parent its spec's "cgroups" names: made by the zygote (its
# counter, the host's pid) and joined by the spare before anything else, so that the kernel's
# grace period a move between groups waits out is spent before a request comes. Adopted by the
# host that takes it (cgroup.py, which sweeps the groups of hosts gone by this name too).
SPARE_GROUP = "pydeno-{host}-s{n}"
# What of a spec differs between workers a spare serves alike: the caps the zygote holds the
# worker to, which it takes from the request that takes the spare.
CAP_KEYS = ("memory_cap", "thread_cap")


def _layers() -> ModuleType:
    from process import layers  # type: ignore[import-not-found]

    return layers  # type: ignore[no-any-return]


def main(argv: list[str]) -> int:
    if argv[1] == "serve":
        return serve(int(argv[2]), int(argv[3]))
    spec = marshal.loads(bytes.fromhex(argv[1]))
    return confine(spec, _layers(), int(spec["parent"]))


def confine(spec: dict[str, Any], layers: ModuleType, parent: int) -> int:
    """Apply the layers to this process and execve deno; the exit code if that ends early."""
    ready = _confine(spec, layers, parent)
    if isinstance(ready, int):
        return ready
    try:
        ready(spec["argv"][1:], dict(spec.get("env", {})), spec.get("argv0"))
    except OSError as exc:
        _say(f"{PREFIX}cannot execute deno: {exc.strerror}\n")
        return EXIT_EXEC_FAILED
    return EXIT_DONE  # pragma: no cover - an execve that succeeds does not return


def _say(line: str) -> None:
    """A line for the host, on the worker's stderr."""
    os.write(2, line.encode())


def _confine(spec: dict[str, Any], layers: ModuleType, parent: int) -> int | Callable[..., None]:
    """Apply the layers to this process and run the self-test's probes: everything but deno's
    execve, which the returned callable makes (layers.ready_to_exec); or the exit code when
    the process is to end now."""
    strict = spec["mode"] == "require"
    simulated: dict[str, str] = spec.get("simulate", {})
    # Layers a simulated kernel accepts but does not enforce: skipped without a word, which is
    # exactly what the self-test exists to catch.
    silent: list[str] = spec.get("silent", [])

    def refused(exc: Exception) -> None:
        if strict:
            _say(f"{PREFIX}{exc}\n")
            raise _Refused
        _say(f"{SKIPPED}{exc}\n")

    def breach(what: str) -> None:
        _say(f"{SELFTEST}{what}\n")

    def apply(layer: str, action: Callable[..., None], *args: object) -> None:
        try:
            if layer in simulated:
                raise layers.LayerUnavailable(layer, simulated[layer])
            if layer not in silent:
                action(*args)
        except layers.LayerUnavailable as exc:
            refused(exc)

    def steps() -> int | Callable[..., None]:
        apply("parent-death signal", layers.set_parent_death_signal, parent)
        if os.getppid() != parent:
            return EXIT_DONE  # the parent is already gone: there is no one to serve
        if spec.get("files") is not None:
            # Before the privilege drop and Landlock: O_PATH, it grants nothing by itself.
            try:
                files = os.open(spec["files"], os.O_PATH | os.O_DIRECTORY)
            except OSError as exc:
                _say(f"{PREFIX}cannot open the worker's files: {exc.strerror}\n")
                return EXIT_EXEC_FAILED
            if files != WORKER_FILES_FD:
                os.dup2(files, WORKER_FILES_FD)
                os.close(files)
            os.set_inheritable(WORKER_FILES_FD, True)
        apply("namespaces", layers.unshare_namespaces)
        if os.geteuid() == 0:
            apply("privilege drop", layers.drop_privileges)
        apply("no_new_privs", layers.set_no_new_privs)
        # "/proc/self" names this process (the pid deno keeps), resolved here, not by the host.
        read = [f"/proc/{os.getpid()}" if path == "/proc/self" else path for path in spec["read"]]
        apply("landlock", layers.restrict_filesystem, read, spec["execute"])
        program, host, targets = spec["argv"][0], spec.get("host"), spec.get("selftest")
        # The filter goes in inside ready_to_exec, after everything it refuses: it refuses every
        # execve but deno's, including any a later deno would make.
        try:
            if "seccomp" in simulated:
                raise layers.LayerUnavailable("seccomp", simulated["seccomp"])
            return layers.ready_to_exec(  # type: ignore[no-any-return]
                program, seccomp="seccomp" not in silent, report=breach, host=host, targets=targets
            )
        except layers.LayerUnavailable as exc:
            refused(exc)
            return layers.ready_to_exec(  # type: ignore[no-any-return]
                program, seccomp=False, report=breach, host=host, targets=targets
            )

    try:
        return steps()
    except _Refused:
        return EXIT_UNAVAILABLE


class _Refused(Exception):
    """A layer was refused under "require": the process is to end with EXIT_UNAVAILABLE."""


# --- serve mode ---------------------------------------------------------------------------------


def serve(channel: int, host: int) -> int:
    """Fork confined workers on the host's request until the host closes its end."""
    # _socket and select, not socket: socket imports enum and selectors, ~5 ms of start-up.
    import _socket
    import select

    sock = _socket.socket(fileno=channel)
    layers = _layers()
    try:
        layers.set_parent_death_signal(host)
        # Workers are held by pidfd, so their pids cannot be reused while the host may signal them.
        platform.check_pidfds()
    except (layers.LayerUnavailable, OSError) as exc:
        sock.sendmsg([marshal.dumps(("unavailable", str(exc)))])
        return 0
    layers.prepare()
    server = _Server(sock, layers, _socket, select)
    try:
        server.run()
    finally:
        server.shutdown()
    return 0


class _Server:
    def __init__(self, sock: Any, layers: ModuleType, socket_module: Any, select_module: Any) -> None:
        self.pid = os.getpid()
        self.sock = sock
        self.sock.setblocking(False)
        self.layers = layers
        self.socket = socket_module
        self.select = select_module
        self.poller = select_module.poll()
        self.poller.register(sock.fileno(), select_module.POLLIN)
        self.pidfds: dict[int, int] = {}  # pid -> pidfd, until the worker is reaped
        self.pids: dict[int, int] = {}  # pidfd -> pid
        self.exited: set[int] = set()  # reported, and waiting for the host's release
        self.released: set[int] = set()  # released while still running: reap without a report
        self.outbox: list[tuple[bytes, list[int], list[int]]] = []
        self.caps: dict[int, tuple[int, int]] = {}  # pid -> (memory, threads) it is killed over (0: none)
        # The spare: a worker started ahead for the spec asked for twice in a row, until a
        # request takes it (pid, pidfd, the host's ends of its pipes, the spec it was started
        # for); the spec the next one is started for, once every request waiting has been
        # served; and the spec the last request asked for. At once, not later: a delay (so as
        # not to compete with the worker just started) showed no gain beyond the noise, and a
        # later spare misses more of the starts that come close together.
        self.spare: tuple[int, int, list[int], str, str | None] | None = None
        self.spares: dict[int, tuple[int, list[str]]] = {}  # pidfd -> (pid, cgroup dirs) until reaped
        self.groups = 0  # spare cgroups made
        # Cgroups of spares reaped, to remove: a group's last task leaves it a moment after it
        # is reaped, so each is tried again at every turn of the loop until it goes.
        self.doomed: list[str] = []
        self.next_spare: dict[str, Any] | None = None
        self.asked: str | None = None
        # When the spare is ended if no request has taken it (its spec's "spare_idle").
        self.spare_until = 0.0
        self.say("ready", self.pid)

    def run(self) -> None:
        sock_fd = self.sock.fileno()
        checked = time.monotonic()
        while True:
            wait = None
            if self.caps or self.doomed:
                wait = max(0, int((checked + CAP_INTERVAL - time.monotonic()) * 1000) + 1)
            if self.spare is not None:
                idle = max(0, int((self.spare_until - time.monotonic()) * 1000) + 1)
                wait = idle if wait is None else min(wait, idle)
            for fd, events in self.poller.poll(wait):
                if fd != sock_fd:
                    self.child_exited(fd)
                    continue
                if events & self.select.POLLOUT:
                    self.flush()
                if events & ~self.select.POLLOUT and not self.receive():
                    return
            if (self.caps or self.doomed) and time.monotonic() - checked >= CAP_INTERVAL:
                checked = time.monotonic()
                self.check_caps()
                self.doomed = [d for d in self.doomed if not _removed(d)]
            if self.spare is not None and time.monotonic() >= self.spare_until:
                # No request took it in its idle time: starts have stopped coming, and it
                # would hold a worker's memory for nothing.
                self.end_spare()
            if self.next_spare is not None:
                spec, self.next_spare = self.next_spare, None
                self.make_spare(spec)

    def check_caps(self) -> None:
        """Kill every capped worker over its memory or thread cap, saying which first."""
        for pid, (memory_cap, thread_cap) in list(self.caps.items()):
            try:
                threads, rss = platform.threads_and_rss(pid)
            except (OSError, IndexError, ValueError):
                continue
            if memory_cap and rss > memory_cap:
                over = ("memory", rss)
            elif thread_cap and threads > thread_cap:
                over = ("threads", threads)
            else:
                continue
            del self.caps[pid]
            self.say("overlimit", pid, *over)
            _quietly(os.killpg, pid, platform.SIGKILL)
            _quietly(os.kill, pid, platform.SIGKILL)

    def say(self, *message: Any, fds: list[int] | None = None, close: list[int] | None = None) -> None:
        """Send message with fds attached, closing those of close once it is sent."""
        self.outbox.append((marshal.dumps(message), fds or [], close or []))
        self.flush()

    def flush(self) -> None:
        while self.outbox:
            data, fds, close = self.outbox[0]
            ancillary = [(self.socket.SOL_SOCKET, self.socket.SCM_RIGHTS, _pack(fds))] if fds else []
            try:
                self.sock.sendmsg([data], ancillary)
            except BlockingIOError:
                # The host reads its end only when it waits on something; never block on it.
                self.poller.modify(self.sock.fileno(), self.select.POLLIN | self.select.POLLOUT)
                return
            self.outbox.pop(0)
            _close(close)
        self.poller.modify(self.sock.fileno(), self.select.POLLIN)

    def receive(self) -> bool:
        """Serve every request waiting; False once the host is gone."""
        socket = self.socket
        while True:
            try:
                data, ancillary, flags, _ = self.sock.recvmsg(
                    MAX_REQUEST, socket.CMSG_SPACE(4 * 4), socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                return True
            except OSError:
                return False
            fds = [fd for level, kind, raw in ancillary if kind == socket.SCM_RIGHTS for fd in _unpack(raw)]
            if not data and not fds:
                return False
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                # Not a request this host sends; its reply could not be matched to it.
                _close(fds)
                return False
            _close(fds)  # no request carries any
            message = marshal.loads(data)
            if message[0] == "spawn":
                self.spawn(message[1])
            elif message[0] == "release":
                self.release(message[1])

    def spawn(self, spec: dict[str, Any]) -> None:
        key = _key(spec)
        if key == self.asked:
            # Asked for twice in a row: the next request will likely ask for it again. A
            # spare started for specs that alternate would be ended unused every time.
            self.next_spare = spec
        self.asked = key
        taken = self.take_spare(key)
        if taken is None:
            try:
                taken = (*self.start(spec), None)
            except OSError as exc:
                self.say("failed", exc.errno, exc.strerror)
                return
        pid, pidfd, pipes, group = taken
        self.pidfds[pid] = pidfd
        self.pids[pidfd] = pid
        caps = (int(spec.get("memory_cap") or 0), int(spec.get("thread_cap") or 0))
        if any(caps):
            self.caps[pid] = caps
        # The cgroup the worker is in, when it is a spare that made one: the host's to adopt.
        self.say("spawned", pid, group, fds=[pidfd, *pipes], close=pipes)

    def start(self, spec: dict[str, Any], group: Sequence[str] = ()) -> tuple[int, int, list[int]]:
        """Fork a worker that confines itself as spec says and execs deno, on three new pipes,
        joining the cgroup dirs of group first: its pid, its pidfd (polled from here on) and the
        host's ends of the pipes. OSError if it could not be started."""
        pipes: list[int] = []
        try:
            for _ in range(3):
                pipes.extend(os.pipe())
            pid = os.fork()
        except OSError:
            _close(pipes)
            raise
        stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w = pipes
        if pid == 0:
            self.child(spec, [stdin_r, stdout_w, stderr_w], group)
        _close([stdin_r, stdout_w, stderr_w])
        ours = [stdin_w, stdout_r, stderr_r]
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            # Untracked it could not be reported or reaped: end it now, while it is ours.
            _close(ours)
            os.kill(pid, platform.SIGKILL)
            os.waitpid(pid, 0)
            raise
        self.poller.register(pidfd, self.select.POLLIN)
        return pid, pidfd, ours

    def take_spare(self, key: str) -> tuple[int, int, list[int], str | None] | None:
        """The spare, if it was started for the spec of key: now a worker, its cgroup now the
        host's; else None (a spare started for another spec is ended, and reaped once it has
        exited, its cgroup removed)."""
        if self.spare is None:
            return None
        pid, pidfd, pipes, started_for, group = self.spare
        if started_for != key:
            self.end_spare()
            return None
        self.spare = None
        del self.spares[pidfd]
        return pid, pidfd, pipes, group

    def end_spare(self) -> None:
        """End the spare: it is reaped once it has exited, and its cgroup removed."""
        if self.spare is None:
            return
        pid, _, pipes, _, _ = self.spare
        self.spare = None
        _close(pipes)
        _quietly(os.killpg, pid, platform.SIGKILL)
        _quietly(os.kill, pid, platform.SIGKILL)

    def make_spare(self, spec: dict[str, Any]) -> None:
        """Start the spare for spec: a worker no request has asked for yet."""
        idle = float(spec.get("spare_idle") or 0)
        if self.spare is not None or idle <= 0:
            return
        group: str | None = None
        dirs: list[str] = []
        try:
            if spec.get("cgroups"):
                self.groups += 1
                group = SPARE_GROUP.format(host=spec["host"], n=self.groups)
                for parent in spec["cgroups"]:
                    os.mkdir(os.path.join(parent, group))
                    dirs.append(os.path.join(parent, group))
            pid, pidfd, pipes = self.start(spec, dirs)
        except OSError:
            self.doomed.extend(dirs)
            return
        self.spares[pidfd] = (pid, dirs)
        self.spare = (pid, pidfd, pipes, _key(spec), group)
        self.spare_until = time.monotonic() + idle
        self.say("spare", pid)

    def child(self, spec: dict[str, Any], fds: list[int], group: Sequence[str]) -> None:
        """The forked child: become the worker, in the cgroup dirs of group. Never returns."""

        def become() -> int:
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            # The socket, the other workers' pidfds and pipes: none may reach deno.
            os.closerange(3, platform.max_fd())
            for directory in group:
                try:
                    with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
                        procs.write(str(os.getpid()))
                except OSError as exc:
                    _say(f"{PREFIX}cannot join its cgroup: {exc.strerror}\n")
                    return EXIT_INTERNAL
            # The zygote's pid, taken before the fork: if it has died since, getppid() no longer
            # names it, and confine() sees that the parent is gone.
            return confine(spec, self.layers, self.pid)

        _exit_with(become)

    def child_exited(self, pidfd: int) -> None:
        spare, dirs = self.spares.pop(pidfd, (None, []))
        if spare is not None:
            # A spare no request took that exited (ended, or unable to confine itself): reaped,
            # and only its pid reported, as no worker's. A request for its spec starts afresh,
            # and that worker tells the host what this one would have.
            self.poller.unregister(pidfd)
            if self.spare is not None and self.spare[1] == pidfd:
                _close(self.spare[2])
                self.spare = None
            try:
                os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
            finally:
                os.close(pidfd)
            self.doomed.extend(dirs)
            self.say("spare gone", spare)
            return
        pid = self.pids.get(pidfd)
        if pid is None:  # pragma: no cover - a descriptor this loop no longer watches
            return
        self.poller.unregister(pidfd)
        self.caps.pop(pid, None)
        result = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
        if result is None:  # pragma: no cover - the pidfd polled readable: it has exited
            return
        returncode = platform.returncode(result)
        # Whatever is left in its process group goes with it, as a host kill would take it. The
        # zombie leader keeps the group's id from being reused until it is reaped.
        _quietly(os.killpg, pid, platform.SIGKILL)
        if pid in self.released:
            self.reap(pid)
            return
        self.exited.add(pid)
        self.say("exit", pid, returncode)

    def release(self, pid: int) -> None:
        if pid not in self.pidfds:
            self.say("reaped", pid)  # never this zygote's, or already reaped: nothing to wait for
            return
        if pid in self.exited:
            self.reap(pid)
            return
        # Still running (the host gave up waiting): end it, and reap it once it has exited.
        self.released.add(pid)
        _quietly(os.killpg, pid, platform.SIGKILL)
        _quietly(os.kill, pid, platform.SIGKILL)

    def reap(self, pid: int) -> None:
        self.caps.pop(pid, None)
        pidfd = self.pidfds.pop(pid)
        del self.pids[pidfd]
        self.exited.discard(pid)
        self.released.discard(pid)
        try:
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
        finally:
            os.close(pidfd)
        self.say("reaped", pid)

    def shutdown(self) -> None:
        """The host is gone: so is every worker (their parent-death signal would see to it)."""
        for pid, _ in self.spares.values():
            _quietly(os.killpg, pid, platform.SIGKILL)
            _quietly(os.kill, pid, platform.SIGKILL)
        # Their groups stay, empty once the tasks have left: a later host sweeps them.
        for pid in self.pidfds:
            _quietly(os.killpg, pid, platform.SIGKILL)
            _quietly(os.kill, pid, platform.SIGKILL)


def _exit_with(become: Callable[[], int]) -> NoReturn:
    """In a forked child: run become (which execs deno or returns an exit code) and exit with
    its code, whatever it raises; the child must never return into the zygote's loop. Failing
    before it could confine itself is a bug, not a refusal."""
    code = EXIT_INTERNAL
    try:
        code = become()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_INTERNAL
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the loop
        os.write(2, f"{PREFIX}internal error: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(code)


def _key(spec: dict[str, Any]) -> str:
    """What of spec a spare is started for, comparable: all of it but the caps. Not marshal:
    its bytes for equal values differ with how many references each has and whether a string
    is interned."""
    return repr(sorted((key, value) for key, value in spec.items() if key not in CAP_KEYS))


def _removed(directory: str) -> bool:
    """Whether a cgroup directory is gone now (or cannot go for good). One try: the zygote
    must not sleep, as the host's removal of a group does (cgroup.py), while a task leaves it;
    the loop tries again at its next turn."""
    try:
        os.rmdir(directory)
    except OSError as exc:
        return exc.errno != errno.EBUSY
    return True


def _pack(fds: list[int]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)


def _unpack(raw: bytes) -> list[int]:
    return [int.from_bytes(raw[i : i + 4], sys.byteorder, signed=True) for i in range(0, len(raw) - 3, 4)]


def _close(fds: list[int]) -> None:
    for fd in fds:
        _quietly(os.close, fd)


def _quietly(action: Callable[..., object], *args: int) -> None:
    # Not contextlib.suppress: its imports would add to this fresh interpreter's start-up.
    try:  # noqa: SIM105
        action(*args)
    except OSError:
        pass


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
