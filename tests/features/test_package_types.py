"""npm packages' own declarations: collected when a package is bundled, kept by hash and
pinned like the bundle, and what a type-checked Code Mode program is checked against."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno._base import package_types as _package_types
from pydeno._base.package_resolver import parse_spec
from pydeno._base.package_types import collect_types
from pydeno.host.process.typecheck import CheckFailed, check, diagnostics
from tests.packages_cache import (
    DATE_FNS,
    DATE_FNS_FORMAT,
    LODASH,
    ZOD,
    ZOD_TO_JSON_SCHEMA,
    packages,
    private_copy,
    shared_cache,
)

ZOD_TYPE_ERROR = 'import { z } from "zod";\nz.string().parse(1) satisfies number'

# --- Collecting a package's declarations (a package folder as the bundler's npm cache has it) ---


def write(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


@pytest.fixture
def npm(tmp_path: Path) -> Path:
    """An npm cache holding fake@1.0.0: exports with conditions, a subpath, a pattern, and
    declarations that reach each other every way a .d.ts can."""
    npm = tmp_path / "npm"
    root = npm / "registry.npmjs.org" / "fake" / "1.0.0"
    manifest = {
        "name": "fake",
        "version": "1.0.0",
        "exports": {
            ".": {
                "require": {"types": "./cjs/index.d.cts", "default": "./cjs/index.cjs"},
                "import": {"types": "./esm/index.d.mts", "default": "./esm/index.mjs"},
            },
            "./sub": {"import": "./esm/sub.mjs"},
            "./locales/*": {"types": "./locales/*.d.ts"},
            "./package.json": "./package.json",
        },
    }
    write(
        root,
        {
            "package.json": json.dumps(manifest),
            "esm/index.d.mts": (
                '/// <reference path="../globals.d.ts" />\n'
                'export * from "./lib";\n'
                'export { helper as aid } from "./helpers.js";\n'
                'import type { Escape } from "../../../../escape";\n'
                'import type { Linked } from "./linked";\n'
                "export declare class Thing {}\n"
                "export type Shape = { a: number };\n"
                '// see "./nowhere" for nothing\n'
            ),
            "esm/lib/index.d.ts": 'import type { Thing } from "..";\nexport declare function make(): void;\n',
            "esm/helpers.d.ts": "export declare function helper(): number;\n",
            "esm/sub.d.mts": "export declare const sub: number;\n",
            "esm/unreached.d.ts": "export declare const never: 0;\n",
            "globals.d.ts": "declare var fakeGlobal: number;\n",
            "locales/fr.d.ts": "export declare const fr: string;\n",
            "cjs/index.d.cts": "export declare const cjs: true;\n",
        },
    )
    (tmp_path / "outside.d.ts").write_text("export type Linked = 1;\n")
    os.symlink(tmp_path / "outside.d.ts", root / "esm" / "linked.d.ts")
    return npm


def test_the_import_condition_s_declarations_and_all_they_reach_are_collected(npm: Path) -> None:
    types, _ = collect_types(npm, parse_spec("fake@^1").subpath, "fake@1.0.0")
    assert types is not None and types.entry == "esm/index.d.mts"
    files = dict(types.files)
    assert sorted(files) == ["esm/helpers.d.ts", "esm/index.d.mts", "esm/lib/index.d.ts", "globals.d.ts"]
    entry = files["esm/index.d.mts"]
    # Each relative import names the exact file: the checker resolves local files exactly.
    assert 'export * from "./lib/index.d.ts";' in entry
    assert 'export { helper as aid } from "./helpers.d.ts";' in entry
    assert '/// <reference path="../globals.d.ts" />' in entry
    assert 'from "./index.d.ts";' not in files["esm/lib/index.d.ts"]  # ".." from lib is esm/, which has no index.d.ts
    # What leaves the package, is a symbolic link, or is only in a comment stays as written.
    assert '"../../../../escape"' in entry and '"./linked"' in entry and '"./nowhere"' in entry


def test_a_subpath_and_a_pattern_have_their_own_entries(npm: Path) -> None:
    sub, _ = collect_types(npm, parse_spec("fake@1.0.0/sub").subpath, "fake@1.0.0")
    locale, _ = collect_types(npm, parse_spec("fake@1.0.0/locales/fr").subpath, "fake@1.0.0")
    assert sub is not None and [path for path, _ in sub.files] == ["esm/sub.d.mts"]
    assert locale is not None and locale.entry == "locales/fr.d.ts"


def test_the_declarations_beside_the_main_script_type_a_package_with_no_exports(tmp_path: Path) -> None:
    root = tmp_path / "registry.npmjs.org" / "plain" / "2.0.0"
    write(root, {"package.json": '{"main": "lib/main.js"}', "lib/main.d.ts": "export declare const x: 1;\n"})
    types, _ = collect_types(tmp_path, parse_spec("plain@2.0.0").subpath, "plain@2.0.0")
    assert types is not None and types.entry == "lib/main.d.ts"


def test_a_package_with_no_declarations_says_so(npm: Path) -> None:
    assert collect_types(npm, parse_spec("fake@1.0.0/missing").subpath, "fake@1.0.0") == (
        None,
        "none: the package ships no declarations",
    )


def test_declarations_past_the_bound_are_not_kept_and_say_why(npm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_package_types, "TYPES_MAX_FILES", 3)
    types, why = collect_types(npm, parse_spec("fake@1.0.0").subpath, "fake@1.0.0")
    assert types is None
    bound = f"3 files or {_package_types.TYPES_MAX_BYTES} bytes"
    assert why == f"none: its declarations pass the bound of {bound}, so the package is typed any"


def test_the_exports_a_prompt_names_carry_their_declared_kinds(npm: Path) -> None:
    types, _ = collect_types(npm, parse_spec("fake@1.0.0").subpath, "fake@1.0.0")
    assert types is not None
    assert types.exports() == (("Thing", "class"), ("Shape", "type"), ("aid", "function"), ("make", "function"))


# --- The type checker's directory --------------------------------------------------------------


def test_a_declaration_file_whose_path_leaves_types_is_refused_before_the_checker_runs() -> None:
    with pytest.raises(CheckFailed, match=r"^the declaration file 'types/../escape.d.ts' is not a path below types/$"):
        check("", "1", sandbox="off", timeout=60, files={"types/../escape.d.ts": ""}, imports={})


def test_an_import_map_entry_that_names_no_given_file_is_refused_before_the_checker_runs() -> None:
    with pytest.raises(CheckFailed, match=r"^the import map sends 'zod' to '/etc/x.d.ts', which is not one of"):
        check("", "1", sandbox="off", timeout=60, files={}, imports={"zod": "/etc/x.d.ts"})


def test_a_diagnostic_in_a_package_s_declarations_names_the_file_under_types() -> None:
    report = "TS1005 [ERROR]: ';' expected.\n    at file:///tmp/pydeno-check-abc/types/zod/3.23.8/lib/types.d.ts:3:5\n"
    [found] = diagnostics(report)
    assert (found.file, found.line, found.column) == ("types/zod/3.23.8/lib/types.d.ts", 3, 5)


# --- Real packages -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cm() -> Iterator[pydeno.CodeMode]:
    with pydeno.CodeMode(
        [pydeno.Tool("half", lambda x: x / 2)], packages=packages(ZOD, DATE_FNS, DATE_FNS_FORMAT, LODASH)
    ) as code_mode:
        code_mode.execute("1")  # its worker starts here, not in the first test that uses it
        yield code_mode


def error_of(result: pydeno.ExecutionResult) -> dict[str, Any]:
    assert not result.ok and result.error is not None
    return result.error


@pytest.mark.slow
@pytest.mark.parametrize(
    ("program", "line", "message"),
    [
        (ZOD_TYPE_ERROR, 2, "TS1360: Type 'string' does not satisfy the expected type 'number'."),
        (
            'import { z } from "zod";\nconst User = z.object({ name: z.string() });\n'
            "const user: z.infer<typeof User> = { name: 1 };\nuser",
            3,
            "TS2322: Type 'number' is not assignable to type 'string'.",
        ),
        (
            'const { z } = await import("zod");\nconst n: number = z.number().parse(1).toUpperCase();\nn',
            2,
            "TS2339: Property 'toUpperCase' does not exist on type 'number'.",
        ),
        ('import { notThere } from "zod";\nnotThere', 1, "TS2305: Module '\"zod\"' has no exported member 'notThere'."),
        (
            'import { format } from "date-fns/format";\nformat(new Date(0), 3)',
            2,
            "TS2345: Argument of type 'number' is not assignable to parameter of type 'string'.",
        ),
        (
            'import { addDays } from "date-fns";\nconst later: string = addDays(new Date(0), 1);\nlater',
            2,
            "TS2322: Type 'Date' is not assignable to type 'string'.",
        ),
    ],
)
def test_a_program_that_misuses_a_package_fails_the_check_naming_the_error(
    cm: pydeno.CodeMode, program: str, line: int, message: str
) -> None:
    error = error_of(cm.execute(program, typecheck=True))
    assert (error["kind"], error["line"]) == ("typecheck_failed", line)
    assert f"nothing ran:\n{message} (line {line}," in error["message"]
    assert "pydeno-check-" not in error["message"]


@pytest.mark.slow
def test_a_program_that_uses_zod_correctly_passes_the_check_and_runs(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        'import { z } from "zod";\nconst User = z.object({ name: z.string(), age: z.number() });\n'
        "type User = z.infer<typeof User>;\n"
        'const user: User = User.parse({ name: "ada", age: await tools.half({ x: 72 }) });\n'
        "const name: string = user.name;\n`${name} ${user.age}`",
        typecheck=True,
    )
    assert result.ok, result.error
    assert result.value == "ada 36"


@pytest.mark.slow
def test_a_subpath_and_its_package_are_checked_against_the_same_declarations(cm: pydeno.CodeMode) -> None:
    result = cm.execute(
        'import { addDays } from "date-fns";\nimport { format } from "date-fns/format";\n'
        'const day: string = format(addDays(new Date(Date.UTC(2024, 0, 1)), 1), "yyyy-MM-dd");\nday',
        typecheck=True,
    )
    assert result.ok, result.error
    assert result.value == "2024-01-02"


@pytest.mark.slow
def test_a_package_without_declarations_is_any_so_any_use_checks(cm: pydeno.CodeMode) -> None:
    result = cm.execute('import { chunk } from "lodash-es";\nconst n: number = chunk([1, 2, 3], 2);\nn', typecheck=True)
    assert result.ok, result.error
    assert result.value == [[1, 2], [3]]


@pytest.mark.slow
def test_declarations_that_import_another_given_package_use_that_package_s_declarations() -> None:
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=packages(ZOD, ZOD_TO_JSON_SCHEMA)) as code_mode:
        good = code_mode.execute(
            'import { z } from "zod";\nimport { zodToJsonSchema } from "zod-to-json-schema";\n'
            'const schema: object = zodToJsonSchema(z.object({ a: z.string() }), { $refStrategy: "none" });\n'
            "Object.keys(schema).includes('properties')",
            typecheck=True,
        )
        assert good.ok, good.error
        assert good.value is True
        bad = code_mode.execute(
            'import { zodToJsonSchema } from "zod-to-json-schema";\nconst n: number = zodToJsonSchema(1);\nn',
            typecheck=True,
        )
        assert (
            "TS2345: Argument of type 'number' is not assignable to parameter of type 'ZodType"
            in (error_of(bad)["message"])
        )


@pytest.mark.slow
def test_declarations_that_import_a_package_not_given_still_check() -> None:
    # zod-to-json-schema's declarations import "zod": without it that import is any.
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=packages(ZOD_TO_JSON_SCHEMA)) as code_mode:
        result = code_mode.execute(
            'import { zodToJsonSchema } from "zod-to-json-schema";\n'
            "const f: (schema: never) => unknown = zodToJsonSchema;\ntypeof f",
            typecheck=True,
        )
    assert result.ok, result.error
    assert result.value == "function"


@pytest.mark.slow
def test_the_prompt_names_a_typed_package_s_exports_not_its_declarations(cm: pydeno.CodeMode) -> None:
    text = cm.typescript()
    assert (
        '// "zod" (zod@3.23.8) has its own declarations: a program that is type-checked is checked against them.\n'
        "// Its exports: namespace z, util, objectUtil; function setErrorMap, "
    ) in text
    assert (
        "// Its exports: function format, formatDate; const formatters, longFormatters; "
        'type FormatOptions, FormatDateOptions.\ndeclare module "date-fns/format";'
    ) in text
    assert '\ndeclare module "lodash-es";' in text and '"lodash-es" (' not in text
    assert text in cm.describe()
    # Prompt-sized: each typed package adds two comment lines, not its declarations.
    assert len(text) < 5000 and "ZodEffects<" not in text


@pytest.mark.slow
def test_describe_says_which_declarations_each_package_has() -> None:
    described = {d["import"]: d["types"] for d in packages(ZOD, DATE_FNS_FORMAT, LODASH).describe()}
    assert described["zod"].startswith("its own: index.d.ts and 12 more declaration files, ")
    assert described["date-fns/format"].startswith("its own: format.d.mts and 5 more declaration files, ")
    assert described["lodash-es"] == "none: the package ships no declarations"


# --- Kept, pinned and checked like bundles -------------------------------------------------------


@pytest.mark.slow
def test_the_lockfile_pins_the_declarations_and_the_cache_keeps_them_by_hash(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    pkgs = pydeno.Packages([ZOD, LODASH], lockfile=lockfile, cache_dir=shared_cache())
    entries = json.loads(lockfile.read_text())["packages"]
    zod = pkgs.bundles[0].types
    assert zod is not None
    assert entries[ZOD]["types"] == {"sha256": zod.sha256}
    assert entries[LODASH]["types"] == {"absent": "none: the package ships no declarations"}
    kept = json.loads((shared_cache() / "types" / f"{zod.sha256}.json").read_text())
    assert kept["entry"] == "index.d.ts" and set(kept["files"]) == {path for path, _ in zod.files}


@pytest.mark.slow
def test_a_tampered_declarations_file_is_refused_never_loaded(tmp_path: Path) -> None:
    cache = private_copy(tmp_path / "cache")
    types = pydeno.Packages([ZOD], cache_dir=cache, offline=True).bundles[0].types
    assert types is not None
    kept = cache / "types" / f"{types.sha256}.json"
    data = json.loads(kept.read_text())
    data["files"]["index.d.ts"] += "export declare const owned: true;\n"
    kept.write_text(json.dumps(data, sort_keys=True, ensure_ascii=False))
    with pytest.raises(pydeno.PackageRefused) as caught:
        pydeno.Packages([ZOD], cache_dir=cache, offline=True)
    assert str(caught.value).startswith(
        f"package bundle refused: {kept} (the declarations of {ZOD!r}, {ZOD}) hashes to sha256 "
    )
    assert str(caught.value).endswith(
        f"not the {types.sha256} the lock names; it was changed after it was written. Delete it to bundle the "
        "package again"
    )
    assert pydeno.classify_error(caught.value).kind == "package_refused"


@pytest.mark.slow
def test_offline_from_the_lockfile_and_the_cache_gives_the_same_declarations(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    online = pydeno.Packages([ZOD, DATE_FNS_FORMAT], lockfile=lockfile, cache_dir=shared_cache())
    cache = private_copy(tmp_path / "cache")
    offline = pydeno.Packages([ZOD, DATE_FNS_FORMAT], lockfile=lockfile, cache_dir=cache, offline=True)
    assert not (cache / "work").exists()  # the bundler never ran
    assert [b.types for b in offline.bundles] == [b.types for b in online.bundles]
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=offline) as code_mode:
        assert error_of(code_mode.execute(ZOD_TYPE_ERROR, typecheck=True))["kind"] == "typecheck_failed"


@pytest.mark.slow
def test_offline_without_the_declarations_file_the_lock_names_is_unresolved(tmp_path: Path) -> None:
    cache = private_copy(tmp_path / "cache")
    shutil.rmtree(cache / "types")
    with pytest.raises(pydeno.PackageUnresolved, match=r"^package 'zod@3.23.8' could not be resolved: offline=True"):
        pydeno.Packages([ZOD], cache_dir=cache, offline=True)


@pytest.mark.slow
def test_a_lockfile_written_before_declarations_were_kept_loads_typed_any(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache())
    data = json.loads(lockfile.read_text())
    del data["packages"][ZOD]["types"]
    lockfile.write_text(json.dumps(data))
    pkgs = pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache(), offline=True)
    assert pkgs.bundles[0].types is None
    assert pkgs.describe()[0]["types"].startswith("none: its lock entry was written before pydeno kept declarations")
    assert "types" not in json.loads(lockfile.read_text())["packages"][ZOD]  # the user's pin is left as it was
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=pkgs) as code_mode:
        result = code_mode.execute(
            'import { z } from "zod";\nconst n: number = z.string().parse("a");\nn', typecheck=True
        )
    assert result.ok, result.error
    assert result.value == "a"


def cache_with_zod_files(target: Path) -> Path:
    """A private cache whose index predates declarations, with the npm cache's copy of zod."""
    cache = private_copy(target)
    index = json.loads((cache / "index.json").read_text())
    for entry in index["packages"].values():
        entry.pop("types", None)
    (cache / "index.json").write_text(json.dumps(index))
    shutil.rmtree(cache / "types")
    folder = Path("work/deno/npm/registry.npmjs.org/zod/3.23.8")
    shutil.copytree(shared_cache() / folder, cache / folder)
    return cache


@pytest.mark.slow
def test_the_cache_s_own_index_gets_declarations_from_the_npm_cache_it_kept(tmp_path: Path) -> None:
    cache = cache_with_zod_files(tmp_path / "cache")
    types = pydeno.Packages([ZOD], cache_dir=cache, offline=True).bundles[0].types
    assert types is not None and types == packages(ZOD).bundles[0].types
    assert json.loads((cache / "index.json").read_text())["packages"][ZOD]["types"] == {"sha256": types.sha256}


@pytest.mark.slow
def test_a_package_whose_declarations_pass_the_bound_is_typed_any_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_with_zod_files(tmp_path / "cache")
    monkeypatch.setattr(_package_types, "TYPES_MAX_FILES", 5)
    pkgs = pydeno.Packages([ZOD], cache_dir=cache, offline=True)
    assert pkgs.bundles[0].types is None
    assert pkgs.describe()[0]["types"].startswith("none: its declarations pass the bound of 5 files or ")
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=pkgs) as code_mode:
        assert '// "zod"' not in code_mode.typescript()
        assert code_mode.execute('import { z } from "zod";\nconst n: number = z;\n1', typecheck=True).ok


@pytest.mark.slow
def test_a_lockfile_s_declarations_pin_refuses_other_declarations(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    pkgs = pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache())
    data = json.loads(lockfile.read_text())
    data["packages"][ZOD]["types"] = {"sha256": "0" * 64}
    lockfile.write_text(json.dumps(data))
    # The lock names declarations the cache does not hold: the package is bundled again.
    with pytest.raises(pydeno.PackageRefused) as caught:
        pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache())
    types = pkgs.bundles[0].types
    assert types is not None
    assert str(caught.value) == (
        f"package bundle refused: {ZOD!r} ({ZOD}) comes with declarations of sha256 {types.sha256}, not the "
        f"declarations of sha256 {'0' * 64} the lockfile {lockfile} names; the lockfile was made from other files. "
        "Remove its entry to accept them"
    )


@pytest.mark.slow
def test_another_machine_bundles_a_lockfile_s_package_to_the_same_bundle_and_declarations(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    first = pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache()).bundles[0]
    # An empty cache: the registry, deno's frozen lock, and the bundler from scratch.
    again = pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=tmp_path / "elsewhere").bundles[0]
    assert (again.sha256, again.types) == (first.sha256, first.types)


@pytest.mark.slow
def test_packages_cross_a_pickle_with_their_declarations() -> None:
    pkgs = packages(ZOD, LODASH)
    copy = pickle.loads(pickle.dumps(pkgs))
    assert [b.types for b in copy.bundles] == [b.types for b in pkgs.bundles]
    assert copy.bundles[0].types is not None and copy.bundles[1].untyped == pkgs.bundles[1].untyped
