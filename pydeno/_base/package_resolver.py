"""How a spec becomes the bundle a guest imports: parsed, read from the cache when the lock
names it and its bytes match, else bundled by deno's own bundler, checked (no node: built-in
the sandbox never grants) and pinned. pydeno/_base/packages.py says what runs where; this
module loads when a ``Packages`` is made, not with pydeno."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import subprocess
from collections.abc import Mapping
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
    load_types,
    sha256_hex,
    types_data,
)

__all__ = ["LOCK_VERSION", "REFUSED_NODE", "Bundle", "Resolver", "Spec", "parse_spec"]

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


def _node_requires(source: str) -> tuple[str, ...]:
    return tuple(sorted(set(_NODE_REQUIRE.findall(source)) | set(_NODE_IMPORT.findall(source))))


class Resolver:
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
        data = _kept(path, spec, entry["sha256"], f"for {spec.text!r}, {entry['resolved']}")
        if data is None:
            return None
        actual = entry["sha256"]
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
        data = _kept(path, spec, sha, f"the declarations of {spec.text!r}, {entry['resolved']}")
        if data is None:
            return None
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


def _kept(path: Path, spec: Spec, sha: str, what: str) -> bytes | None:
    """The bytes the cache keeps under the lock's hash sha, None when it keeps none; refused
    when they hash to anything else (what: whose they are, for the message)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PackageUnresolved(f"package {spec.text!r} could not be resolved: {path}: {exc}") from exc
    actual = sha256_hex(data)
    if actual != sha:
        raise PackageRefused(
            f"package bundle refused: {path} ({what}) hashes to sha256 {actual}, not the {sha} the lock names; it "
            "was changed after it was written. Delete it to bundle the package again"
        )
    return data


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
