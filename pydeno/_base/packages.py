"""npm packages for guests: ``pydeno.Packages``.

What runs where (docs/packages.md has the diagram):

- On the host, once per package and machine: deno's own bundler (``deno bundle``) resolves
  the spec against the npm registry and writes one self-contained CommonJS script of the
  package and everything it imports. It runs as a separate process with an environment of
  its own (its npm cache under ``cache_dir``, the registry and proxy settings and nothing
  else), ``--no-remote`` (no URL is ever fetched), no ``node_modules`` directory and no
  ``--allow-scripts`` (so no install script runs), and it executes none of the package's
  code: bundling reads the files.
- On disk: each bundle is kept by the SHA-256 of its bytes; the lockfile pins each spec's
  exact version, deno's own lock (the integrity of every tarball) and the bundle's hash. A
  cached bundle whose bytes do not hash to what the lock says is refused, never loaded.
- Beside the bundle, the package's own declarations (the ``.d.ts`` files its spec's import
  reaches, read from what the bundler unpacked) are kept and pinned the same way, for Code
  Mode's type checker; a package that ships none is typed ``any``.
- In the worker: the host sends the bundle's text with the runtime's start; the guest's
  ``import("zod")`` (or a static import) runs it once, in the guest's own realm, with no
  network, files or environment. Nothing the package does can reach further than the
  guest's own code could.

This module holds what the runtime's options and the prompts need of packages; the resolver
and the bundler (package_resolver.py) and the declarations' reader (package_types.py) load
when a ``Packages`` is first made, not with pydeno: they bring hashlib and compile their
patterns, and options.py imports this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import PackageRefused

if TYPE_CHECKING:
    from .package_resolver import Bundle

__all__ = ["Packages", "checker_inputs", "declarations", "prompt_line"]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pydeno" / "packages"


class Packages:
    """npm packages for guests: ``pydeno.Packages(["zod@3.23.8", "date-fns@^3"])``, then
    ``pydeno.Runtime(packages=pkgs)`` (and every surface that takes runtime options). The
    guest writes ``import { z } from "zod"``.

    Construction resolves and bundles every spec (or reads it from the cache), so a spec
    that cannot be had fails here, with :class:`pydeno.PackageUnresolved` or
    :class:`pydeno.PackageRefused`, not in the middle of a guest's run. ``lockfile`` (a
    path) pins exact versions and the hashes of each bundle and its declarations; it is
    written when a spec is resolved that it did not hold. ``cache_dir`` defaults to
    ``~/.cache/pydeno/packages``. With ``offline=True`` nothing is fetched: every spec must
    be in the lockfile (or the cache's own index) and its bundle and declarations in the
    cache."""

    def __init__(
        self,
        specs: Iterable[str],
        *,
        lockfile: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        offline: bool = False,
    ) -> None:
        if isinstance(specs, (str, bytes)):
            raise TypeError(f"specs must be a list of package specs, e.g. [{specs!r}], not a single string")
        from .package_resolver import Resolver, parse_spec

        parsed = [parse_spec(text) for text in specs]
        seen: dict[str, str] = {}
        for spec in parsed:
            if spec.specifier in seen:
                raise ValueError(
                    f"package specs {seen[spec.specifier]!r} and {spec.text!r} are both imported as "
                    f"{spec.specifier!r}: give each package once"
                )
            seen[spec.specifier] = spec.text
        if not isinstance(offline, bool):
            raise TypeError(f"offline must be True or False, not {offline!r}")
        self._specs = tuple(parsed)
        self._lockfile = Path(lockfile) if lockfile is not None else None
        self._cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._offline = offline
        self._bundles = Resolver(self._specs, self._lockfile, self._cache, offline).bundles()

    @classmethod
    def _of(cls, bundles: tuple[Bundle, ...]) -> Packages:
        """Packages made of bundles already resolved (a pickle's copy, e.g. in a Ray actor)."""
        from .package_types import sha256_hex, types_data

        self = cls.__new__(cls)
        self._specs = ()
        self._lockfile = None
        self._cache = default_cache_dir()
        self._offline = True
        for bundle in bundles:
            if sha256_hex(bundle.source.encode()) != bundle.sha256 or (
                bundle.types is not None
                and sha256_hex(types_data(bundle.types.entry, dict(bundle.types.files))) != bundle.types.sha256
            ):
                raise PackageRefused(f"package bundle refused: {bundle.package} does not hash to what it says")
        self._bundles = bundles
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Packages._of, (self._bundles,))

    @property
    def bundles(self) -> tuple[Bundle, ...]:
        return self._bundles

    def describe(self) -> list[dict[str, Any]]:
        """One dict per importable specifier: ``import``, ``package`` (name@version),
        ``bytes``, ``sha256`` and ``types`` (what declarations it has, or "none: " and why)."""
        return [bundle.describe() for bundle in self._bundles]

    def __repr__(self) -> str:
        return f"Packages({[b.package + b.specifier[len(b.package.rpartition('@')[0]) :] for b in self._bundles]!r})"


def checker_inputs(packages: Packages | None) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """What the type checker needs of the packages: an ambient module (typed ``any``) for
    each one without declarations, the others' declaration files (path in the checker's
    directory -> text), and the import map (specifier -> the path of its entry there)."""
    ambient: list[str] = []
    files: dict[str, str] = {}
    imports: dict[str, str] = {}
    for bundle in packages.bundles if packages is not None else ():
        if bundle.types is None:
            ambient.append(f"declare module {json.dumps(bundle.specifier)};")
            continue
        # One folder per package and version: date-fns and date-fns/format share theirs.
        name, _, version = bundle.package.rpartition("@")
        folder = f"types/{name}/{version}"
        for path, text in bundle.types.files:
            files[f"{folder}/{path}"] = text
        imports[bundle.specifier] = f"./{folder}/{bundle.types.entry}"
    return ambient, files, imports


def prompt_line(packages: Packages | None) -> str:
    """What a model reads about imports: the packages it may import, or that there are none."""
    if packages is None or not packages.bundles:
        return "no npm packages"
    names = ", ".join(f"`{b.specifier}` ({b.package})" for b in packages.bundles)
    first = packages.bundles[0].specifier
    return (
        f"npm packages only these, imported by name: {names} (`import ... from {json.dumps(first)}` or "
        f"`await import({json.dumps(first)})`)"
    )


def declarations(packages: Packages | None) -> list[str]:
    """The .d.ts lines a prompt shows for the packages: an ambient module each, so that a
    program may import it, its exports typed ``any``. A package with its own declarations
    also gets a comment that says so and names its exports (the declarations themselves go
    to the type checker, not into a prompt: zod's alone are tens of kilobytes)."""
    lines: list[str] = []
    for bundle in packages.bundles if packages is not None else ():
        if bundle.types is not None:
            from .package_types import exports_summary

            lines.append(
                f"// {json.dumps(bundle.specifier)} ({bundle.package}) has its own declarations: a program that is "
                "type-checked is checked against them."
            )
            lines.append(f"// Its exports: {exports_summary(bundle.types.exports())}.")
        lines.append(f"declare module {json.dumps(bundle.specifier)};")
    return lines
