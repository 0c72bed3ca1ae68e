"""A package's own TypeScript declarations: found from its manifest in the bundler's npm cache,
each relative specifier made exact, bounded, hashed, and summarised as the names it exports."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import re
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

NO_TYPES: Final = "none: the package ships no declarations"
NO_FILES: Final = "none: the bundler's npm cache does not hold the package's files"
UNREADABLE: Final = "none: its declarations could not be read"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


class Types(NamedTuple):
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


def types_data(entry: str, files: Mapping[str, str]) -> bytes:
    """The one byte form a set of declarations is kept and hashed in."""
    return json.dumps({"entry": entry, "files": dict(files)}, sort_keys=True, ensure_ascii=False).encode()


def make_types(entry: str, files: Mapping[str, str]) -> Types:
    return Types(entry, tuple(sorted(files.items())), sha256_hex(types_data(entry, files)))


def load_types(data: bytes) -> Types:
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
    return make_types(entry, files)


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


def collect_types(npm: Path, subpath: str, resolved: str) -> tuple[Types | None, str]:
    """The declarations a package ships for its import of subpath, read from the bundler's npm
    cache (npm is its folder), or None and why there are none."""
    name, _, version = resolved.rpartition("@")
    root = _package_folder(npm, name, version)
    if root is None:
        return None, NO_FILES
    try:
        manifest = json.loads((root / "package.json").read_text(encoding="utf-8"))
        present = _regular_files(root)
        entry = _types_entry(present, manifest if isinstance(manifest, dict) else {}, subpath)
        if entry is None:
            return None, NO_TYPES
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
        return None, f"{UNREADABLE} ({type(exc).__name__}), so the package is typed any"
    return make_types(entry, files), ""


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


def exports_summary(exports: tuple[tuple[str, str], ...]) -> str:
    """At most _SUMMARY_NAMES names, values before types, grouped by kind."""
    ordered = [item for item in exports if item[1] != "type"] + [item for item in exports if item[1] == "type"]
    groups: dict[str, list[str]] = {}
    for name, kind in ordered[:_SUMMARY_NAMES]:
        groups.setdefault(kind, []).append(name)
    text = "; ".join(f"{kind} {', '.join(names)}" for kind, names in groups.items()) or "none it declares plainly"
    rest = len(ordered) - _SUMMARY_NAMES
    return f"{text}; and {rest} more" if rest > 0 else text
