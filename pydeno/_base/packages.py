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
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from .deno import find_deno
from .errors import PackageRefused, PackageUnresolved
from .package_types import (
    NO_FILES,
    NO_TYPES,
    UNREADABLE,
    Types,
    collect_types,
    exports_summary,
    load_types,
    sha256_hex,
    types_data,
)

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
_UNCOLLECTED: Final = (
    "none: its lock entry was written before pydeno kept declarations; remove the entry to bundle it again with them"
)


class Spec(NamedTuple):
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


class Bundle(NamedTuple):
    """One package as the guest gets it: the specifier it imports, the exact package it came
    from, the bundle's text, hash and the node: built-ins it requires, and the package's own
    declarations for the type checker (None, and why in ``untyped``, when it has none)."""

    specifier: str
    package: str
    sha256: str
    source: str
    requires: tuple[str, ...]
    types: Types | None = None
    untyped: str = NO_TYPES

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
        actual = sha256_hex(data)
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
        types, untyped = collect_types(self.cache / "work" / "deno" / "npm", spec.subpath, entry["resolved"])
        if types is None and untyped.startswith((NO_FILES, UNREADABLE)):
            return None
        entry["types"] = self._keep_types(types) if types is not None else {"absent": untyped}
        self.changed = True
        return dict(entry["types"])

    def _keep_types(self, types: Types) -> dict[str, Any]:
        kept = self.cache / "types"
        kept.mkdir(parents=True, exist_ok=True)
        _write_atomic(kept / f"{types.sha256}.json", types_data(types.entry, dict(types.files)))
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
        actual = sha256_hex(data)
        if actual != sha:
            raise PackageRefused(
                f"package bundle refused: {path} (the declarations of {spec.text!r}, {entry['resolved']}) hashes to "
                f"sha256 {actual}, not the {sha} the lock names; it was changed after it was written. Delete it to "
                "bundle the package again"
            )
        try:
            types = load_types(data)
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
        import tempfile  # bundling only: not with the package

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
        digest = sha256_hex(data)
        resolved = entry["resolved"] if entry is not None else _resolved(spec, deno_lock)
        # The bundler has just unpacked the package into its npm cache: its declarations are
        # read from there, under the same lock that keeps other bundlers out.
        types, untyped = collect_types(work / "deno" / "npm", spec.subpath, resolved)
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
        bundle = Bundle(spec.specifier, resolved, digest, source, _node_requires(source), types, untyped or NO_TYPES)
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
    import tempfile  # writing a lockfile only: not with the package

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
            lines.append(f"// Its exports: {exports_summary(bundle.types.exports())}.")
        lines.append(f"declare module {json.dumps(bundle.specifier)};")
    return lines
