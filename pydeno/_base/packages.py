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
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import posixpath
import re
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .deno import find_deno
from .errors import PackageRefused, PackageUnresolved

__all__ = ["Bundle", "Packages", "Types", "checker_inputs", "declarations", "parse_spec", "prompt_line"]

# A package name as npm allows it (lower case, optionally scoped), a version or range (no
# slash, no space: "3.23.8", "^3", "latest"), and an optional subpath ("/format").
_SPEC: Final = re.compile(
    r"(?:npm:)?(?P<name>(?:@[a-z0-9~][a-z0-9._~-]*/)?[a-z0-9~][a-z0-9._~-]*)"
    r"(?:@(?P<range>[^/\s@][^/\s]*))?(?P<subpath>(?:/[A-Za-z0-9._~@+-]+)*)"
)
_NAME_MAX: Final = 214
LOCK_VERSION: Final = 1
# Node's modules whose purpose is what the sandbox never grants (files, the network,
# processes, threads, the system): a package that needs one is refused when it is bundled,
# since every use of it would fail in the guest.
REFUSED_NODE: Final = {
    "child_process": "subprocesses",
    "cluster": "subprocesses",
    "dgram": "the network",
    "dns": "the network",
    "dns/promises": "the network",
    "fs": "files",
    "fs/promises": "files",
    "http": "the network",
    "http2": "the network",
    "https": "the network",
    "inspector": "the inspector",
    "module": "files",
    "net": "the network",
    "os": "system information",
    "readline": "a terminal",
    "repl": "a terminal",
    "sqlite": "files",
    "tls": "the network",
    "tty": "a terminal",
    "v8": "the engine's internals",
    "vm": "new contexts",
    "wasi": "files",
    "worker_threads": "threads",
}
_NODE_REQUIRE: Final = re.compile(r"""\brequire\(\s*["']node:([a-z_/]+)["']\s*\)""")
_NODE_IMPORT: Final = re.compile(r"""(?:\bfrom\s*|\bimport\s*\(?\s*)["']node:([a-z_/]+)["']""")
_BUNDLE_TIMEOUT: Final = 300.0
# What of the host's environment the bundler keeps: where the registry is and how to reach it.
_BUNDLER_ENV: Final = (
    "NPM_CONFIG_REGISTRY",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "DENO_CERT",
    "DENO_TLS_CA_STORE",
    "NODE_EXTRA_CA_CERTS",
)
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_NO_TYPES: Final = "none: the package ships no declarations"
_NO_FILES: Final = "none: the bundler's npm cache does not hold the package's files"
_UNREADABLE: Final = "none: its declarations could not be read"
_UNCOLLECTED: Final = (
    "none: its lock entry was written before pydeno kept declarations; remove the entry to bundle it again with them"
)


@dataclass(frozen=True, slots=True)
class Spec:
    """One spec as written, parsed: ``date-fns@^3/format`` is package ``date-fns``, range
    ``^3``, subpath ``/format``, imported by the guest as ``date-fns/format``."""

    text: str
    name: str
    range: str
    subpath: str

    @property
    def specifier(self) -> str:
        return self.name + self.subpath

    def entry(self) -> str:
        """The bundler's specifier for it."""
        version = f"@{self.range}" if self.range else ""
        return f"npm:{self.name}{version}{self.subpath}"


def parse_spec(text: object) -> Spec:
    """A spec string (``"zod@3.23.8"``, ``"date-fns@^3/format"``, ``"@scope/pkg"``), or a
    ValueError saying what is wrong with it."""
    if not isinstance(text, str):
        raise TypeError(f"a package spec must be a str such as 'zod@3.23.8', not {type(text).__name__}")
    found = _SPEC.fullmatch(text)
    if found is None or len(found.group("name")) > _NAME_MAX:
        raise ValueError(
            f"package spec {text!r} is not an npm package: write name[@version][/subpath], e.g. 'zod@3.23.8', "
            "'date-fns@^3' or 'date-fns@^3/format' (names are lower case)"
        )
    return Spec(text, found.group("name"), found.group("range") or "", found.group("subpath") or "")


@dataclass(frozen=True, slots=True)
class Bundle:
    """One package as the guest gets it: the specifier it imports, the exact package it came
    from, the bundle's text, hash and the node: built-ins it requires, and the package's own
    declarations for the type checker (None, and why in ``untyped``, when it has none)."""

    specifier: str
    package: str
    sha256: str
    source: str
    requires: tuple[str, ...]
    types: Types | None = None
    untyped: str = _NO_TYPES

    def describe(self) -> dict[str, Any]:
        return {
            "import": self.specifier,
            "package": self.package,
            "bytes": len(self.source.encode()),
            "sha256": self.sha256,
            "types": self.types.describe() if self.types is not None else self.untyped,
        }


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pydeno" / "packages"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _node_requires(source: str) -> tuple[str, ...]:
    return tuple(sorted(set(_NODE_REQUIRE.findall(source)) | set(_NODE_IMPORT.findall(source))))


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
        self._bundles = _Resolver(self._specs, self._lockfile, self._cache, offline).bundles()

    @classmethod
    def _of(cls, bundles: tuple[Bundle, ...]) -> Packages:
        """Packages made of bundles already resolved (a pickle's copy, e.g. in a Ray actor)."""
        self = cls.__new__(cls)
        self._specs = ()
        self._lockfile = None
        self._cache = default_cache_dir()
        self._offline = True
        for bundle in bundles:
            if _sha256(bundle.source.encode()) != bundle.sha256 or (
                bundle.types is not None
                and _sha256(_types_data(bundle.types.entry, dict(bundle.types.files))) != bundle.types.sha256
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


class _Resolver:
    """Each spec's bundle: from the cache when the lock (the lockfile, else the cache's own
    index) names it and its bytes match, else from the bundler unless offline."""

    def __init__(self, specs: tuple[Spec, ...], lockfile: Path | None, cache: Path, offline: bool) -> None:
        self.specs = specs
        self.lockfile = lockfile
        self.cache = cache
        self.offline = offline
        self.lock_path = lockfile if lockfile is not None else cache / "index.json"
        self.entries = self._read_lock()
        # Whether an entry read from the lock was given what it lacked, to be written back.
        self.changed = False

    def _read_lock(self) -> dict[str, dict[str, Any]]:
        try:
            text = self.lock_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise PackageUnresolved(f"package lockfile {self.lock_path} could not be read: {exc}") from exc
        try:
            data = json.loads(text)
            if data.get("lockfileVersion") != LOCK_VERSION or not isinstance(data.get("packages"), dict):
                raise ValueError(f"lockfileVersion must be {LOCK_VERSION}, with a packages object")
            entries: dict[str, dict[str, Any]] = data["packages"]
            for entry in entries.values():
                _check_entry(entry)
        except (ValueError, AttributeError, TypeError, KeyError) as exc:
            raise PackageRefused(f"package lockfile {self.lock_path} is not a pydeno lockfile: {exc}") from exc
        return entries

    def bundles(self) -> tuple[Bundle, ...]:
        results: dict[str, Bundle] = {}
        missing: list[Spec] = []
        for spec in self.specs:
            entry = self.entries.get(spec.text)
            cached = self._cached(spec, entry) if entry is not None else None
            if cached is not None:
                results[spec.text] = cached
            else:
                missing.append(spec)
        if missing and self.offline:
            names = ", ".join(repr(spec.text) for spec in missing)
            where = f"the lockfile {self.lockfile}" if self.lockfile is not None else f"the cache {self.cache}"
            raise PackageUnresolved(
                f"package {names} could not be resolved: offline=True and {where} does not hold its bundle; "
                "run once with the registry reachable (offline=False) to fill the cache"
            )
        if missing:
            work = self.cache / "work"
            work.mkdir(parents=True, exist_ok=True)
            # One bundler at a time per cache, across processes too: the first run on a
            # machine fetches deno's esbuild into the npm cache, and two at once would race.
            with open(work / ".lock", "a+b") as held:
                fcntl.flock(held, fcntl.LOCK_EX)
                made = [self._bundle(spec) for spec in missing]
            for spec, (bundle, entry) in zip(missing, made, strict=True):
                results[spec.text] = bundle
                self.entries[spec.text] = entry
            self._write_lock()
        elif self.changed or (self.lockfile is not None and set(self.entries) != {spec.text for spec in self.specs}):
            self._write_lock()
        return tuple(results[spec.text] for spec in self.specs)

    def _cached(self, spec: Spec, entry: dict[str, Any]) -> Bundle | None:
        """The bundle the lock names, or None when the cache does not hold it; refused when
        the cache holds other bytes under its name."""
        path = self.cache / "bundles" / f"{entry['sha256']}.js"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PackageUnresolved(f"package {spec.text!r} could not be resolved: {path}: {exc}") from exc
        actual = _sha256(data)
        if actual != entry["sha256"]:
            raise PackageRefused(
                f"package bundle refused: {path} (for {spec.text!r}, {entry['resolved']}) hashes to sha256 {actual}, "
                f"not the {entry['sha256']} the lock names; it was changed after it was written. Delete it to "
                "bundle the package again"
            )
        source = data.decode("utf-8")
        made = functools.partial(Bundle, spec.specifier, entry["resolved"], actual, source, _node_requires(source))
        pinned = entry.get("types")
        if pinned is None and self.lockfile is None:
            pinned = self._upgrade(spec, entry)
        if pinned is None:
            return made(None, _UNCOLLECTED)
        if "sha256" not in pinned:
            return made(None, pinned["absent"])
        types = self._cached_types(spec, entry, pinned["sha256"])
        return made(types) if types is not None else None

    def _upgrade(self, spec: Spec, entry: dict[str, Any]) -> dict[str, Any] | None:
        """The declarations of an entry the cache's own index kept before pydeno kept them,
        read from the npm cache the bundler left (nothing is fetched), pinned in the index.
        A lockfile's entry is the user's pin, and stays as it was written."""
        types, untyped = _collect_types(self.cache / "work" / "deno" / "npm", spec, entry["resolved"])
        if types is None and untyped.startswith((_NO_FILES, _UNREADABLE)):
            return None
        entry["types"] = self._keep_types(types) if types is not None else {"absent": untyped}
        self.changed = True
        return dict(entry["types"])

    def _keep_types(self, types: Types) -> dict[str, Any]:
        kept = self.cache / "types"
        kept.mkdir(parents=True, exist_ok=True)
        _write_atomic(kept / f"{types.sha256}.json", _types_data(types.entry, dict(types.files)))
        return {"sha256": types.sha256}

    def _cached_types(self, spec: Spec, entry: Mapping[str, Any], sha: str) -> Types | None:
        """The declarations the lock names, like the bundle: None when the cache lacks them
        (the package is bundled again), refused when other bytes are kept under their name."""
        path = self.cache / "types" / f"{sha}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PackageUnresolved(f"package {spec.text!r} could not be resolved: {path}: {exc}") from exc
        actual = _sha256(data)
        if actual != sha:
            raise PackageRefused(
                f"package bundle refused: {path} (the declarations of {spec.text!r}, {entry['resolved']}) hashes to "
                f"sha256 {actual}, not the {sha} the lock names; it was changed after it was written. Delete it to "
                "bundle the package again"
            )
        try:
            types = _load_types(data)
        except ValueError as exc:
            raise PackageRefused(
                f"package bundle refused: {path} (the declarations of {spec.text!r}, {entry['resolved']}) is not a "
                f"set of declarations: {exc}"
            ) from exc
        # The bytes hash to the lock's name, so they were written in the kept form; a set that
        # reads back to another hash was not written by pydeno.
        if types.sha256 != sha:
            raise PackageRefused(
                f"package bundle refused: {path} (the declarations of {spec.text!r}, {entry['resolved']}) is not in "
                "the form pydeno keeps declarations in"
            )
        return types

    def _bundle(self, spec: Spec) -> tuple[Bundle, dict[str, Any]]:
        entry = self.entries.get(spec.text)
        work = self.cache / "work"
        work.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=work, prefix="b-") as tmp:
            folder = Path(tmp)
            entry_file = folder / "entry.mjs"
            target = spec.entry()
            # The namespace and its default: `export *` alone leaves the default out.
            entry_file.write_text(
                f"export * from {json.dumps(target)};\nimport * as namespace from {json.dumps(target)};\n"
                "export default namespace.default;\n",
                encoding="utf-8",
            )
            lock = folder / "deno.lock"
            frozen: list[str] = []
            if entry is not None:
                lock.write_text(json.dumps(entry["deno"]), encoding="utf-8")
                frozen = ["--frozen-lockfile"]
            output = folder / "bundle.js"
            # Paths in the bundle's comments are relative to the bundler's folder, a fresh one
            # each time with the npm cache beside it: the same package gives the same bytes
            # whatever the folder's random name and wherever cache_dir is.
            argv = [
                find_deno(), "bundle", "--quiet", "--no-config", f"--lock={lock.name}", *frozen,
                "--platform", "browser", "--format", "cjs", "--no-remote", "--node-modules-dir=none",
                "-o", output.name, entry_file.name,
            ]  # fmt: skip
            env = {name: os.environ[name] for name in _BUNDLER_ENV if name in os.environ}
            env |= {"DENO_DIR": "../deno", "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1"}
            try:
                done = subprocess.run(
                    argv, cwd=folder, env=env, capture_output=True, text=True, timeout=_BUNDLE_TIMEOUT, check=False
                )
            except subprocess.TimeoutExpired as exc:
                raise PackageUnresolved(
                    f"package {spec.text!r} could not be resolved: the bundler did not finish in {_BUNDLE_TIMEOUT:g} s"
                ) from exc
            except OSError as exc:
                raise PackageUnresolved(
                    f"package {spec.text!r} could not be resolved: deno would not run: {exc}"
                ) from exc
            if done.returncode != 0 or not output.is_file():
                raise _bundler_failure(spec, _ANSI.sub("", done.stderr), entry is not None)
            data = output.read_bytes()
            deno_lock = json.loads(lock.read_text(encoding="utf-8"))
        source = data.decode("utf-8")
        _refuse_node(spec, source)
        digest = _sha256(data)
        resolved = entry["resolved"] if entry is not None else _resolved(spec, deno_lock)
        # The bundler has just unpacked the package into its npm cache: its declarations are
        # read from there, under the same lock that keeps other bundlers out.
        types, untyped = _collect_types(work / "deno" / "npm", spec, resolved)
        if entry is not None and entry["sha256"] != digest:
            raise PackageRefused(
                f"package bundle refused: {spec.text!r} ({resolved}) bundles to sha256 {digest}, not the "
                f"{entry['sha256']} the lockfile {self.lock_path} names; the lockfile was made from other "
                "bytes (another bundler, registry or a changed package). Remove its entry to accept the new bundle"
            )
        pinned = entry.get("types") if entry is not None else None
        if pinned is not None and pinned.get("sha256") != (types.sha256 if types is not None else None):
            got = f"declarations of sha256 {types.sha256}" if types is not None else f"no declarations ({untyped})"
            want = f"declarations of sha256 {pinned['sha256']}" if "sha256" in pinned else "no declarations"
            raise PackageRefused(
                f"package bundle refused: {spec.text!r} ({resolved}) comes with {got}, not the {want} the lockfile "
                f"{self.lock_path} names; the lockfile was made from other files. Remove its entry to accept them"
            )
        bundles = self.cache / "bundles"
        bundles.mkdir(parents=True, exist_ok=True)
        _write_atomic(bundles / f"{digest}.js", data)
        made = {"import": spec.specifier, "resolved": resolved, "sha256": digest, "deno": deno_lock}
        if types is not None:
            made["types"] = self._keep_types(types)
        else:
            made["types"] = pinned if pinned is not None else {"absent": untyped}
        bundle = Bundle(spec.specifier, resolved, digest, source, _node_requires(source), types, untyped or _NO_TYPES)
        return bundle, made

    def _write_lock(self) -> None:
        names = {spec.text for spec in self.specs}
        entries = self.entries if self.lockfile is None else {k: v for k, v in self.entries.items() if k in names}
        data = {"lockfileVersion": LOCK_VERSION, "packages": dict(sorted(entries.items()))}
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.lock_path, (json.dumps(data, indent=2) + "\n").encode())


def _check_entry(entry: Mapping[str, Any]) -> None:
    for key in ("import", "resolved", "sha256"):
        if not isinstance(entry.get(key), str):
            raise ValueError(f"an entry lacks its {key!r}")
    if not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]):
        raise ValueError(f"{entry['sha256']!r} is not a sha256")
    if not isinstance(entry.get("deno"), dict):
        raise ValueError("an entry lacks deno's lock")
    # A lock written before declarations were kept has no "types": it loads, typed any.
    types = entry.get("types")
    if types is None:
        return
    if not isinstance(types, dict) or not (
        (
            set(types) == {"sha256"}
            and isinstance(types["sha256"], str)
            and re.fullmatch(r"[0-9a-f]{64}", types["sha256"])
        )
        or (set(types) == {"absent"} and isinstance(types["absent"], str))
    ):
        raise ValueError(f"an entry's types must be {{'sha256': ...}} or {{'absent': why}}, not {types!r}")


def _resolved(spec: Spec, deno_lock: Mapping[str, Any]) -> str:
    """name@version that deno's lock says the spec resolved to."""
    for key, version in (deno_lock.get("specifiers") or {}).items():
        if isinstance(key, str) and isinstance(version, str) and key.startswith(f"npm:{spec.name}@"):
            return f"{spec.name}@{version.partition('_')[0]}"
    raise PackageUnresolved(
        f"package {spec.text!r} could not be resolved: the bundler's lock does not name its version"
    )


def _refuse_node(spec: Spec, source: str) -> None:
    needs = sorted(name for name in _node_requires(source) if name in REFUSED_NODE)
    if needs:
        what = ", ".join(f"node:{name} ({REFUSED_NODE[name]})" for name in needs)
        raise PackageRefused(
            f"package bundle refused: {spec.text!r} needs {what}, which the sandbox never grants; every use would "
            "fail in the guest. Do that work on the host (a bound function or tool) or pick a package that does "
            "not need it"
        )


_NOT_FOUND: Final = re.compile(r"Could not find constraint '([^']*)'|Could not resolve '([^']*)'|not found")
_NO_NETWORK: Final = re.compile(
    r"(?i)error sending request|dns error|connection refused|network|timed out|failed to lookup"
)


def _bundler_failure(spec: Spec, stderr: str, locked: bool) -> Exception:
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and "experimental" not in line]
    detail = "; ".join(lines[:3])[:500] or "the bundler failed without saying why"
    if _NO_NETWORK.search(stderr):
        return PackageUnresolved(
            f"package {spec.text!r} could not be resolved: the registry could not be reached ({detail}); "
            "with no registry, use offline=True with a cache that holds it"
        )
    if "lockfile" in stderr.lower() and locked:
        return PackageRefused(
            f"package bundle refused: {spec.text!r}: deno's lock in the lockfile does not hold ({detail})"
        )
    if _NOT_FOUND.search(stderr):
        return PackageUnresolved(f"package {spec.text!r} could not be resolved: {detail}")
    if "top-level await" in stderr.lower():
        return PackageRefused(
            f"package bundle refused: {spec.text!r} uses top-level await, which a bundled package cannot ({detail})"
        )
    return PackageUnresolved(f"package {spec.text!r} could not be resolved: {detail}")


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- A package's own declarations -------------------------------------------------------------

# How much of a package's declarations the type checker gets: past this, the package is typed
# `any`. The set is written into the checker's private directory for every checked program,
# so the bound is what one check may cost to prepare, with room for large packages.
TYPES_MAX_FILES: Final = 2000
TYPES_MAX_BYTES: Final = 8 * 2**20
# The export conditions that name what an `import` of the package reaches, read in the
# package's own order as node and TypeScript read them; "require" is not among them.
_TYPE_CONDITIONS: Final = frozenset({"types", "import", "module", "default", "browser", "node", "deno"})
_DECLARATION: Final = re.compile(r"\.d\.[mc]?ts$")
# A relative specifier in a declaration file: `from "./x"`, `import "./x"`, `import("./x")`,
# `require("./x")`; and `/// <reference path="x" />`, which names a path, not a module.
_RELATIVE: Final = re.compile(
    r"""(?P<head>\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)(?P<q>["'])(?P<spec>\.\.?(?:/[^"'\n]*)?)(?P=q)"""
)
_REFERENCE: Final = re.compile(
    r"""(?m)^(?P<head>\s*///\s*<reference\s+path\s*=\s*)(?P<q>["'])(?P<spec>[^"'\n]+)(?P=q)"""
)
# The exports a prompt names, read from the declarations' text (not a parse: a name whose
# kind is not plain from one file says "export").
_KEYWORDS: Final = r"(function|class|const|let|var|interface|type|enum|namespace|module)"
_DECLARED: Final = re.compile(
    r"(?m)^(export\s+)?(?:declare\s+)?(?:default\s+)?(?:abstract\s+)?(?:async\s+)?"
    + _KEYWORDS
    + r"\s+([A-Za-z_$][\w$]*)"
)
_STAR: Final = re.compile(r"""(?m)^export\s+\*\s+from\s*["']([^"'\n]+)["']""")
_STAR_AS: Final = re.compile(r"""(?m)^export\s+\*\s+as\s+([A-Za-z_$][\w$]*)\s+from\s*["']([^"'\n]+)["']""")
_NAMED: Final = re.compile(r"""(?m)^export\s+(?:type\s+)?\{([^}]*)\}(?:\s*from\s*["']([^"'\n]+)["'])?""")
_NAMESPACE_IMPORT: Final = re.compile(r"""\bimport\s+(?:type\s+)?\*\s+as\s+([A-Za-z_$][\w$]*)\s+from\s*["']""")
_NAMED_IMPORT: Final = re.compile(r"""(?m)^import\s+(?:type\s+)?\{([^}]*)\}\s*from\s*["']([^"'\n]+)["']""")
_KINDS: Final = {
    "function": "function",
    "class": "class",
    "const": "const",
    "let": "const",
    "var": "const",
    "enum": "enum",
    "namespace": "namespace",
    "module": "namespace",
    "interface": "type",
    "type": "type",
}
# How many exported names the prompt gives a package: enough for its main entry points.
_SUMMARY_NAMES: Final = 40


@dataclass(frozen=True, slots=True)
class Types:
    """A package's own declarations as the type checker gets them: the ``.d.ts`` files its
    spec's entry reaches (paths relative to the package's folder), the entry, and the hash
    of the two. Each relative import in them names the exact file it resolves to: the
    checker reads them as local files, which deno resolves exactly, not as node would."""

    entry: str
    files: tuple[tuple[str, str], ...]
    sha256: str

    @property
    def bytes(self) -> int:
        return sum(len(text.encode()) for _, text in self.files)

    def describe(self) -> str:
        return f"its own: {self.entry} and {len(self.files) - 1} more declaration files, {self.bytes} bytes"

    def exports(self) -> tuple[tuple[str, str], ...]:
        """The names the entry exports, with their declared kinds."""
        return _exports(self)


def _types_data(entry: str, files: Mapping[str, str]) -> bytes:
    """The one byte form a set of declarations is kept and hashed in."""
    return json.dumps({"entry": entry, "files": dict(files)}, sort_keys=True, ensure_ascii=False).encode()


def _make_types(entry: str, files: Mapping[str, str]) -> Types:
    return Types(entry, tuple(sorted(files.items())), _sha256(_types_data(entry, files)))


def _load_types(data: bytes) -> Types:
    """The declarations kept in data; ValueError when it is not such a set."""
    loaded = json.loads(data.decode("utf-8"))
    if not isinstance(loaded, dict) or set(loaded) != {"entry", "files"}:
        raise ValueError("not an entry and its files")
    entry, files = loaded["entry"], loaded["files"]
    if not isinstance(files, dict) or entry not in files:
        raise ValueError("its entry is not one of its files")
    for path, text in files.items():
        if not isinstance(text, str) or not _safe_path(path) or not _DECLARATION.search(path):
            raise ValueError(f"{path!r} is not a declaration file's relative path")
    return _make_types(entry, files)


def _safe_path(path: object) -> bool:
    """A relative POSIX path that stays below the folder it is put in."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _package_folder(npm: Path, name: str, version: str) -> Path | None:
    """Where the bundler's npm cache unpacked name@version: ``<registry>/<name>/<version>``
    (a copy deno makes for other peer dependencies has a suffix, and the same files)."""
    found = sorted(path for path in npm.glob(f"*/{name}/{version}") if (path / "package.json").is_file())
    registry = os.environ.get("NPM_CONFIG_REGISTRY") or "https://registry.npmjs.org/"
    host = urllib.parse.urlsplit(registry).hostname or ""
    preferred = [path for path in found if path.relative_to(npm).parts[0].startswith(host)]
    return next(iter(preferred or found), None)


def _regular_files(root: Path) -> set[str]:
    """Every regular file below root, relative to it; a symbolic link is none, so nothing
    read through one of these names leaves the package's folder."""
    found: set[str] = set()
    pending = [("", root)]
    while pending:
        prefix, folder = pending.pop()
        with os.scandir(folder) as entries:
            for item in entries:
                if item.is_dir(follow_symlinks=False):
                    pending.append((f"{prefix}{item.name}/", Path(item.path)))
                elif item.is_file(follow_symlinks=False):
                    found.add(prefix + item.name)
    return found


def _conditions(target: Any, star: str | None) -> str | None:
    """The path an exports target names for an import, with a pattern's star filled in."""
    if isinstance(target, str):
        return target.replace("*", star) if star is not None else target
    if isinstance(target, list):
        for item in target:
            found = _conditions(item, star)
            if found is not None:
                return found
        return None
    if isinstance(target, dict):
        for condition, value in target.items():
            if condition in _TYPE_CONDITIONS:
                found = _conditions(value, star)
                if found is not None:
                    return found
    return None


def _exports_target(exports: Any, key: str) -> str | None:
    """What package.json's exports give an import of key ("." or "./format"), or None."""
    if not isinstance(exports, dict) or not any(isinstance(k, str) and k.startswith(".") for k in exports):
        exports = {".": exports}
    if key in exports:
        return _conditions(exports[key], None)
    # A pattern ("./locales/*"): the longest prefix that matches, as node picks it.
    best: tuple[int, str, str] | None = None
    for pattern in exports:
        if not isinstance(pattern, str) or pattern.count("*") != 1:
            continue
        prefix, _, suffix = pattern.partition("*")
        fits = key.startswith(prefix) and key.endswith(suffix) and len(key) >= len(prefix) + len(suffix)
        if fits and (best is None or len(prefix) > best[0]):
            best = (len(prefix), pattern, key[len(prefix) : len(key) - len(suffix)])
    if best is None:
        return None
    return _conditions(exports[best[1]], best[2])


def _declaration_for(files: set[str], path: str) -> str | None:
    """The declaration file among files that types the module at path (relative to the
    package's folder): the file itself when it is one, the one beside a script, or a
    folder's index."""
    path = "" if path in (".", "./") else posixpath.normpath(path.removeprefix("./"))
    if path == ".." or path.startswith(("../", "/")):
        return None
    stem, ext = posixpath.splitext(path)
    if _DECLARATION.search(path):
        candidates = [path]
    elif ext in (".mjs", ".mts"):
        candidates = [stem + ".d.mts", stem + ".d.ts"]
    elif ext in (".cjs", ".cts"):
        candidates = [stem + ".d.cts", stem + ".d.ts"]
    elif ext in (".js", ".jsx", ".ts", ".tsx"):
        candidates = [stem + ".d.ts"]
    else:
        candidates = [path + ".d.ts", posixpath.join(path, "index.d.ts")] if path else ["index.d.ts"]
    return next((candidate for candidate in candidates if candidate in files), None)


def _types_entry(files: set[str], manifest: Mapping[str, Any], subpath: str) -> str | None:
    """The declaration file an import of the package's subpath ("" or "/format") reaches:
    its exports' target for it, else (for the package itself) its types or typings field,
    else the declarations beside its module or main script, else its index.d.ts."""
    if "exports" in manifest:
        target = _exports_target(manifest["exports"], "." + subpath)
        found = _declaration_for(files, target) if target is not None else None
        if found is not None:
            return found
    if subpath:
        return _declaration_for(files, subpath[1:])
    for field in ("types", "typings", "module", "main"):
        value = manifest.get(field)
        found = _declaration_for(files, value) if isinstance(value, str) else None
        if found is not None:
            return found
    return _declaration_for(files, "index.d.ts")


def _rewrite(files: set[str], path: str, text: str, reached: list[str]) -> str:
    """text of the declaration file at path with each relative specifier naming the exact
    file it resolves to; the files it reaches are appended to reached. A specifier that
    resolves to none (one in a comment, say) is left as it is."""
    folder = posixpath.dirname(path)

    def respell(found: re.Match[str], target: str | None) -> str:
        if target is None:
            return found[0]
        reached.append(target)
        spelled = posixpath.relpath(target, folder or ".")
        if not spelled.startswith("../"):
            spelled = "./" + spelled
        return f"{found['head']}{found['q']}{spelled}{found['q']}"

    def module(found: re.Match[str]) -> str:
        return respell(found, _declaration_for(files, posixpath.join(folder, found["spec"])))

    def reference(found: re.Match[str]) -> str:
        joined = posixpath.join(folder, found["spec"])
        return respell(found, _declaration_for(files, joined if _DECLARATION.search(joined) else joined + ".d.ts"))

    return _REFERENCE.sub(reference, _RELATIVE.sub(module, text))


def _collect_types(npm: Path, spec: Spec, resolved: str) -> tuple[Types | None, str]:
    """The declarations spec's package ships for its import, read from the bundler's npm
    cache (npm is its folder), or None and why there are none."""
    name, _, version = resolved.rpartition("@")
    root = _package_folder(npm, name, version)
    if root is None:
        return None, _NO_FILES
    try:
        manifest = json.loads((root / "package.json").read_text(encoding="utf-8"))
        present = _regular_files(root)
        entry = _types_entry(present, manifest if isinstance(manifest, dict) else {}, spec.subpath)
        if entry is None:
            return None, _NO_TYPES
        files: dict[str, str] = {}
        total = 0
        pending = [entry]
        while pending:
            path = pending.pop()
            if path in files:
                continue
            data = (root / path).read_bytes()
            total += len(data)
            if len(files) >= TYPES_MAX_FILES or total > TYPES_MAX_BYTES:
                return None, (
                    f"none: its declarations pass the bound of {TYPES_MAX_FILES} files or {TYPES_MAX_BYTES} bytes, "
                    "so the package is typed any"
                )
            reached: list[str] = []
            files[path] = _rewrite(present, path, data.decode("utf-8").removeprefix("\ufeff"), reached)
            pending.extend(reversed(reached))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"{_UNREADABLE} ({type(exc).__name__}), so the package is typed any"
    return _make_types(entry, files), ""


@functools.lru_cache(maxsize=64)
def _exports(types: Types) -> tuple[tuple[str, str], ...]:
    """The names types' entry exports and their kinds ("function", "class", "const", "enum",
    "namespace", "type", or "export" when the text does not say plainly): its own first,
    then what it re-exports with ``export *``, nearest first."""
    files = dict(types.files)
    memo: dict[str, dict[str, str]] = {}

    def source(path: str, spec: str | None) -> str | None:
        if spec is None or not spec.startswith("."):
            return None
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), spec))
        return joined if joined in files else None

    def locals_of(path: str) -> dict[str, str]:
        """What a file declares or imports under a name, and its kind."""
        text = files[path]
        found = {m.group(3): _KINDS[m.group(2)] for m in reversed(list(_DECLARED.finditer(text)))}
        found |= dict.fromkeys(_NAMESPACE_IMPORT.findall(text), "namespace")
        for named in _NAMED_IMPORT.finditer(text):
            origin = source(path, named.group(2))
            for original, alias in _names(named.group(1)):
                if alias not in found:
                    found[alias] = names_of(origin).get(original, "export") if origin is not None else "export"
        return found

    def names_of(path: str) -> dict[str, str]:
        if path in memo:
            return memo[path]
        memo[path] = {}  # a cycle of re-exports ends here
        text = files[path]
        own: dict[str, str] = {}
        for declared in _DECLARED.finditer(text):
            if declared.group(1):
                own.setdefault(declared.group(3), _KINDS[declared.group(2)])
        for star_as in _STAR_AS.finditer(text):
            own.setdefault(star_as.group(1), "namespace")
        local: dict[str, str] | None = None
        for named in _NAMED.finditer(text):
            origin = source(path, named.group(2))
            for original, alias in _names(named.group(1)):
                if origin is not None:
                    own.setdefault(alias, names_of(origin).get(original, "export"))
                elif named.group(2) is None:
                    local = local if local is not None else locals_of(path)
                    own.setdefault(alias, local.get(original, "export"))
                else:
                    own.setdefault(alias, "export")
        for star in _STAR.finditer(text):
            origin = source(path, star.group(1))
            for name, kind in (names_of(origin) if origin is not None else {}).items():
                own.setdefault(name, kind)
        own.pop("default", None)
        memo[path] = own
        return own

    return tuple(names_of(types.entry).items())


def _names(listed: str) -> list[tuple[str, str]]:
    """(name, alias) for each item of an ``{ a, type b, c as d }`` list."""
    pairs = []
    for written in listed.split(","):
        item = written.strip().removeprefix("type ").strip()
        if item:
            original, _, alias = item.partition(" as ")
            pairs.append((original.strip(), (alias or original).strip()))
    return pairs


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
            lines.append(
                f"// {json.dumps(bundle.specifier)} ({bundle.package}) has its own declarations: a program that is "
                "type-checked is checked against them."
            )
            lines.append(f"// Its exports: {_summary(bundle.types.exports())}.")
        lines.append(f"declare module {json.dumps(bundle.specifier)};")
    return lines


def _summary(exports: tuple[tuple[str, str], ...]) -> str:
    """At most _SUMMARY_NAMES names, values before types, grouped by kind."""
    ordered = [item for item in exports if item[1] != "type"] + [item for item in exports if item[1] == "type"]
    groups: dict[str, list[str]] = {}
    for name, kind in ordered[:_SUMMARY_NAMES]:
        groups.setdefault(kind, []).append(name)
    text = "; ".join(f"{kind} {', '.join(names)}" for kind, names in groups.items()) or "none it declares plainly"
    rest = len(ordered) - _SUMMARY_NAMES
    return f"{text}; and {rest} more" if rest > 0 else text
