"""The sandbox launcher: applies the OS layers to itself, then becomes deno.

Run as ``python -I -S pydeno/host/_launcher.py SPEC`` where SPEC is a hex-encoded
:mod:`marshal` of::

    {"parent": <host pid>, "mode": "require" | "best_effort", "read": [...], "execute": [...],
     "env": {...}, "argv": [deno, ...], "simulate": {<layer>: <reason>}, "silent": [<layer>]}

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
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

EXIT_UNAVAILABLE = 71
PREFIX = "pydeno-launcher: "
SKIPPED = PREFIX + "skipped: "


def main(argv: list[str]) -> int:
    spec = marshal.loads(bytes.fromhex(argv[1]))
    # -I keeps the package off sys.path; _layers needs nothing but the standard library.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _layers as layers  # type: ignore[import-not-found]

    strict = spec["mode"] == "require"
    simulated: dict[str, str] = spec.get("simulate", {})
    # Layers a simulated kernel accepts but does not enforce: skipped without a word, which is
    # exactly what the worker's self-test exists to catch.
    silent: list[str] = spec.get("silent", [])
    parent = int(spec["parent"])

    def refused(exc: Exception) -> None:
        if strict:
            os.write(2, f"{PREFIX}{exc}\n".encode())
            raise SystemExit(EXIT_UNAVAILABLE)
        os.write(2, f"{SKIPPED}{exc}\n".encode())

    def apply(layer: str, action: Callable[..., None], *args: object) -> None:
        try:
            if layer in simulated:
                raise layers.LayerUnavailable(layer, simulated[layer])
            if layer not in silent:
                action(*args)
        except layers.LayerUnavailable as exc:
            refused(exc)

    apply("parent-death signal", layers.set_parent_death_signal, parent)
    if os.getppid() != parent:
        return 0  # the host is already gone: there is no one to serve
    apply("namespaces", layers.unshare_namespaces)
    if os.geteuid() == 0:
        apply("privilege drop", layers.drop_privileges)
    apply("no_new_privs", layers.set_no_new_privs)
    # "/proc/self" names this process (the pid deno keeps), resolved here, not by the host.
    read = [f"/proc/{os.getpid()}" if path == "/proc/self" else path for path in spec["read"]]
    apply("landlock", layers.restrict_filesystem, read, spec["execute"])
    command, env = spec["argv"], dict(spec.get("env", {}))
    try:
        # The filter goes in inside exec_confined, right before its execve: it refuses every
        # other execve, including any a later deno would make.
        try:
            if "seccomp" in simulated:
                raise layers.LayerUnavailable("seccomp", simulated["seccomp"])
            layers.exec_confined(command, env, seccomp="seccomp" not in silent)
        except layers.LayerUnavailable as exc:
            refused(exc)
            layers.exec_confined(command, env, seccomp=False)
    except OSError as exc:
        os.write(2, f"{PREFIX}cannot execute deno: {exc.strerror}\n".encode())
        return 127
    return 0  # pragma: no cover - exec_confined does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
