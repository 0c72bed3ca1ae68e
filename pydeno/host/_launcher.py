"""The sandbox launcher: applies the OS layers to itself, then becomes deno.

Run as ``python -I pydeno/host/_launcher.py SPEC`` where SPEC is JSON::

    {"parent": <host pid>, "read": [...], "execute": [...], "env": {...}, "argv": [deno, ...]}

It is a separate program, not ``preexec_fn``: the host is threaded, and running Python
between fork and exec in a threaded process can deadlock. Here the process is a fresh,
single-threaded interpreter, and ``execve`` replaces it with deno, keeping the pid, so the
host supervises the very process it started.

Order matters. The parent-death signal first, so that from here on a dead host means a dead
worker. Namespaces next, while still root. Then drop privileges (which re-arms the
parent-death signal the kernel clears on a uid change), ``no_new_privs``, Landlock, and the
seccomp filter last, as it also refuses the syscalls the earlier layers need.

On a layer the kernel refuses it prints ``pydeno-launcher: <layer> is unavailable: <why>`` to
stderr and exits with EXIT_UNAVAILABLE; the host turns that into its own message.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Final

EXIT_UNAVAILABLE: Final = 71
PREFIX: Final = "pydeno-launcher: "


def _load_layers() -> Any:
    # -I keeps the package off sys.path; _layers needs nothing but the standard library.
    spec = importlib.util.spec_from_file_location("_pydeno_layers", Path(__file__).with_name("_layers.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    layers = _load_layers()
    try:
        layers.set_parent_death_signal(int(spec["parent"]))
        layers.unshare_namespaces()
        if os.geteuid() == 0:
            layers.drop_privileges()
        layers.set_no_new_privs()
        # "/proc/self" names this process (the pid deno keeps), resolved here, not by the host.
        read = [f"/proc/{os.getpid()}" if path == "/proc/self" else path for path in spec["read"]]
        layers.restrict_filesystem(read, spec["execute"])
        layers.install_seccomp_filter()
    except layers.LayerUnavailable as exc:
        sys.stderr.write(f"{PREFIX}{exc}\n")
        sys.stderr.flush()
        return EXIT_UNAVAILABLE
    command = spec["argv"]
    os.execve(command[0], command, dict(spec.get("env", {})))
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
