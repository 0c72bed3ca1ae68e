"""Where the tests keep the npm packages they bundle: one cache per machine, filled from the
registry the first time (real packages, deno's real bundler), so later runs and tests reuse
it. A test that changes a cache copies it to its own directory first."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

import pydeno

ZOD: Final = "zod@3.23.8"
DATE_FNS: Final = "date-fns@3.6.0"
DATE_FNS_FORMAT: Final = "date-fns@3.6.0/format"
LODASH: Final = "lodash-es@4.17.21"
ZOD_TO_JSON_SCHEMA: Final = "zod-to-json-schema@3.23.5"
SPECS: Final = (ZOD, DATE_FNS, DATE_FNS_FORMAT, LODASH, ZOD_TO_JSON_SCHEMA)


def xdg_cache_home() -> Path:
    """An XDG_CACHE_HOME whose pydeno/packages is the shared cache (for a server process)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pydeno-tests" / "xdg"


def shared_cache() -> Path:
    return xdg_cache_home() / "pydeno" / "packages"


def packages(*specs: str) -> pydeno.Packages:
    """The specs from the shared cache (bundled from the registry the first time)."""
    return pydeno.Packages(list(specs or SPECS), cache_dir=shared_cache())


def private_copy(target: Path) -> Path:
    """A copy of the shared cache's bundles, declarations and index (not deno's npm cache) at
    target."""
    packages()  # filled first
    source = shared_cache()
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source / "bundles", target / "bundles")
    shutil.copytree(source / "types", target / "types")
    shutil.copy(source / "index.json", target / "index.json")
    return target
