"""Where the deno binary is: the one the ``deno`` wheel installed, or ``$PYDENO_DENO``. Both
the workers and the package bundler (pydeno/_base/package_resolver.py) run it."""

from __future__ import annotations

import os
import threading

__all__ = ["find_deno"]


_wheel_deno: list[str] = []
_wheel_deno_lock = threading.Lock()


def find_deno() -> str:
    """The deno binary: ``$PYDENO_DENO`` if set, else the one the ``deno`` wheel installed."""
    override = os.environ.get("PYDENO_DENO")
    if override:
        return override
    # Once, under a lock: the wheel's lookup reads sysconfig, whose first read fills a
    # shared dict that another thread reading at the same moment sees half-filled (its
    # "EXE" missing), so two runtimes starting at once on fresh threads could fail.
    with _wheel_deno_lock:
        if not _wheel_deno:
            try:
                import deno
            except ImportError as exc:  # pragma: no cover - deno is a dependency
                raise FileNotFoundError("the deno package is not installed: pip install deno") from exc
            _wheel_deno.append(str(deno.find_deno_bin()))
        return _wheel_deno[0]
