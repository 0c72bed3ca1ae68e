"""npm packages for guests (pydeno.Packages): real packages from the registry, bundled by
deno's own bundler, cached by hash, pinned by a lockfile, and imported by real workers that
have no network and no files."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pydeno
from tests.packages_cache import (
    DATE_FNS,
    DATE_FNS_FORMAT,
    LODASH,
    ZOD,
    packages,
    private_copy,
    shared_cache,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rt() -> object:
    with pydeno.Runtime(packages=packages()) as runtime:
        yield runtime


def test_a_guest_imports_a_package_by_its_name_with_a_dynamic_import(rt: pydeno.Runtime) -> None:
    assert rt.eval('const { z } = await import("zod"); z.object({ a: z.number() }).parse({ a: 1 })') == {"a": 1}


def test_a_package_s_errors_reach_the_host_as_the_guest_s_errors(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval('const zod = await import("zod"); zod.z.number().parse("one")')
    assert caught.value.name == "ZodError" and "Expected number, received string" in caught.value.message
    assert pydeno.classify_error(caught.value).kind == "js_error"


def test_a_subpath_is_its_own_module(rt: pydeno.Runtime) -> None:
    code = 'const { format } = await import("date-fns/format"); format(new Date(Date.UTC(2024, 0, 2)), "yyyy")'
    assert rt.eval(code) == "2024"


def test_an_added_module_imports_packages_statically() -> None:
    with pydeno.Runtime(packages=packages(ZOD, LODASH)) as runtime:
        runtime.add_module(
            "shapes",
            'import { z } from "zod";\nimport { chunk } from "lodash-es";\n'
            "export const pairs = (xs) => chunk(z.array(z.number()).parse(xs), 2);",
        )
        assert runtime.eval_module('import { pairs } from "shapes"; export const out = pairs([1, 2, 3]);') == {
            "out": [[1, 2], [3]]
        }


def test_a_package_runs_once_per_runtime_and_its_instance_is_shared(rt: pydeno.Runtime) -> None:
    rt.eval('globalThis.first = (await import("zod")).z; 1')
    assert rt.eval('(await import("zod")).z === first') is True


def test_a_default_export_is_the_package_s_own(rt: pydeno.Runtime) -> None:
    assert rt.eval('const m = await import("zod"); m.default === m.z') is True
    assert rt.eval('"default" in (await import("date-fns/format"))') is True
    assert rt.eval('"default" in (await import("date-fns"))') is False


def test_a_package_that_depends_on_another_works_with_the_guest_s_copy_of_it(rt: pydeno.Runtime) -> None:
    code = textwrap.dedent(
        """
        const { z } = await import("zod");
        const { zodToJsonSchema } = await import("zod-to-json-schema");
        zodToJsonSchema(z.object({ name: z.string() }), { $refStrategy: "none" }).properties
        """
    )
    assert rt.eval(code) == {"name": {"type": "string"}}


def test_a_bare_import_of_a_package_not_provided_names_packages(rt: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval('await import("left-pad")')
    assert caught.value.message == (
        'module "left-pad" cannot be imported in this sandbox: it was not added; only added modules, packages '
        "the host provided (packages=) and node: built-ins can be imported"
    )
    assert pydeno.classify_error(caught.value).kind == "import_refused"


def test_the_guest_still_has_no_network_and_no_files_with_packages_loaded(rt: pydeno.Runtime) -> None:
    rt.eval('await import("lodash-es"); await import("zod"); 1')
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval('await fetch("https://registry.npmjs.org/zod")')
    assert pydeno.classify_error(caught.value).kind == "sandbox_denied"
    with pytest.raises(pydeno.JavaScriptError) as caught:
        rt.eval("(await import('node:fs')).readFileSync('/etc/hostname', 'utf8')")
    assert pydeno.classify_error(caught.value).kind == "sandbox_denied"


def test_a_poisoned_realm_cannot_make_the_worker_load_a_package_wrongly() -> None:
    with pydeno.Runtime(packages=packages(LODASH)) as runtime:
        runtime.eval(
            "Object.keys = () => ['evil']; globalThis.eval = () => { throw new Error('poisoned eval'); };"
            "Reflect.apply = () => { throw new Error('poisoned apply'); }; JSON.stringify = () => '\"x\"';"
        )
        assert runtime.eval('(await import("lodash-es")).sum([1, 2, 3])') == 6


def test_describe_lists_each_importable_name_with_its_exact_package() -> None:
    described = packages(ZOD, DATE_FNS_FORMAT).describe()
    assert [(d["import"], d["package"]) for d in described] == [("zod", ZOD), ("date-fns/format", DATE_FNS)]
    assert all(len(d["sha256"]) == 64 and d["bytes"] > 1000 for d in described)


def test_a_range_resolves_to_an_exact_version_written_to_the_lockfile(tmp_path: Path) -> None:
    lockfile = tmp_path / "pydeno-packages.lock"
    pkgs = pydeno.Packages(["date-fns@^3"], lockfile=lockfile, cache_dir=shared_cache())
    entry = json.loads(lockfile.read_text())["packages"]["date-fns@^3"]
    assert entry["resolved"].startswith("date-fns@3.") and entry["sha256"] == pkgs.bundles[0].sha256
    assert entry["import"] == "date-fns"
    assert any(key.startswith("date-fns@") for key in entry["deno"]["npm"])


def test_a_lockfile_lists_only_the_specs_given(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    pydeno.Packages([ZOD, LODASH], lockfile=lockfile, cache_dir=shared_cache())
    pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=shared_cache())
    assert list(json.loads(lockfile.read_text())["packages"]) == [ZOD]


def test_offline_uses_the_cache_and_the_lockfile_only(tmp_path: Path) -> None:
    cache = private_copy(tmp_path / "cache")
    pkgs = pydeno.Packages([ZOD], cache_dir=cache, offline=True)
    assert not (cache / "work").exists()  # the bundler never ran
    with pydeno.Runtime(packages=pkgs) as runtime:
        assert runtime.eval('(await import("zod")).z.string().parse("ok")') == "ok"


def test_offline_without_the_bundle_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(pydeno.PackageUnresolved) as caught:
        pydeno.Packages(["left-pad@1.3.0"], cache_dir=tmp_path, offline=True)
    assert str(caught.value) == (
        f"package 'left-pad@1.3.0' could not be resolved: offline=True and the cache {tmp_path} does not hold its "
        "bundle; run once with the registry reachable (offline=False) to fill the cache"
    )
    assert pydeno.classify_error(caught.value).kind == "package_unresolved"


def test_with_no_registry_at_all_a_cached_lockfile_still_serves_and_a_new_spec_fails_clearly(tmp_path: Path) -> None:
    cache = private_copy(tmp_path / "cache")
    lockfile = tmp_path / "lock.json"
    pydeno.Packages([ZOD], lockfile=lockfile, cache_dir=cache)
    script = textwrap.dedent(
        f"""
        import sys, pydeno
        pkgs = pydeno.Packages([{ZOD!r}], lockfile={str(lockfile)!r}, cache_dir={str(cache)!r})
        with pydeno.Runtime(packages=pkgs) as rt:
            print(rt.eval('(await import("zod")).z.number().parse(7)'))
        try:
            pydeno.Packages(["left-pad@1.3.0"], cache_dir={str(cache)!r})
        except pydeno.PackageUnresolved as exc:
            print(exc.kind, str(exc).split(":")[0])
        """
    )
    # A network namespace of its own, with no interface but a loopback that is down.
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["7", "package_unresolved package 'left-pad@1.3.0' could not be resolved"]


def test_a_tampered_cache_entry_is_refused_never_loaded(tmp_path: Path) -> None:
    cache = private_copy(tmp_path / "cache")
    sha = pydeno.Packages([ZOD], cache_dir=cache, offline=True).bundles[0].sha256
    bundle = cache / "bundles" / f"{sha}.js"
    bundle.write_text(bundle.read_text() + "\nglobalThis.owned = true;\n")
    with pytest.raises(pydeno.PackageRefused) as caught:
        pydeno.Packages([ZOD], cache_dir=cache, offline=True)
    assert str(caught.value).startswith(f"package bundle refused: {bundle} (for {ZOD!r}, {ZOD}) hashes to sha256 ")
    assert pydeno.classify_error(caught.value).kind == "package_refused"


def test_a_lockfile_that_names_a_different_hash_is_refused(tmp_path: Path) -> None:
    lockfile = tmp_path / "lock.json"
    cache = shared_cache()
    pydeno.Packages([LODASH], lockfile=lockfile, cache_dir=cache)
    data = json.loads(lockfile.read_text())
    data["packages"][LODASH]["sha256"] = "0" * 64
    lockfile.write_text(json.dumps(data))
    with pytest.raises(pydeno.PackageRefused) as caught:
        pydeno.Packages([LODASH], lockfile=lockfile, cache_dir=cache)
    assert f"not the {'0' * 64} the lockfile {lockfile} names" in str(caught.value)


def test_a_package_that_needs_files_is_refused_when_it_is_bundled() -> None:
    with pytest.raises(pydeno.PackageRefused) as caught:
        pydeno.Packages(["fs-extra@11.2.0"], cache_dir=shared_cache())
    assert str(caught.value).startswith(
        "package bundle refused: 'fs-extra@11.2.0' needs node:fs (files), which the sandbox never grants"
    )


def test_a_package_that_does_not_exist_is_unresolved() -> None:
    with pytest.raises(pydeno.PackageUnresolved) as caught:
        pydeno.Packages(["pydeno-no-such-package-xyz@1.0.0"], cache_dir=shared_cache())
    assert str(caught.value).startswith("package 'pydeno-no-such-package-xyz@1.0.0' could not be resolved: ")
    assert pydeno.classify_error(caught.value).kind == "package_unresolved"


def test_packages_cross_a_pickle_whole_and_are_checked_on_arrival() -> None:
    pkgs = packages(LODASH)
    copy = pickle.loads(pickle.dumps(pkgs))
    assert copy.describe() == pkgs.describe()
    with pydeno.Runtime(packages=copy) as runtime:
        assert runtime.eval('(await import("lodash-es")).max([3, 9, 4])') == 9


@pytest.mark.parametrize(
    ("specs", "error", "message"),
    [
        ("zod", TypeError, "specs must be a list of package specs, e.g. ['zod'], not a single string"),
        ([3], TypeError, "a package spec must be a str such as 'zod@3.23.8', not int"),
        (["Zod@3"], ValueError, "package spec 'Zod@3' is not an npm package: write name[@version][/subpath]"),
        (["zod@3", "zod@^3"], ValueError, "package specs 'zod@3' and 'zod@^3' are both imported as 'zod'"),
    ],
)
def test_a_bad_spec_is_refused_before_anything_runs(specs: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        pydeno.Packages(specs, cache_dir="/nonexistent")  # type: ignore[arg-type]
    assert str(caught.value).startswith(message)


def test_packages_must_be_a_packages_object() -> None:
    with pytest.raises(TypeError, match=r"packages must be a pydeno.Packages, e.g. packages=pydeno.Packages"):
        pydeno.Runtime(packages=["zod"])  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_async_runtime_takes_packages_too(anyio_backend: str) -> None:
    async with pydeno.AsyncRuntime(packages=packages(DATE_FNS)) as runtime:
        assert await runtime.eval('(await import("date-fns")).addDays(new Date(0), 1).getTime()') == 86_400_000


def test_an_eval_and_a_code_mode_program_import_a_package_statically(rt: pydeno.Runtime) -> None:
    assert rt.eval('import { chunk } from "lodash-es";\nchunk([1, 2, 3], 2)') == [[1, 2], [3]]
    with pydeno.CodeMode([pydeno.Tool("one", lambda: 1)], packages=packages(ZOD)) as cm:
        result = cm.execute('import { z } from "zod";\nz.number().parse(await tools.one({}))')
        assert result.ok, result.error
        assert result.value == 1


# A package whose bundle requires a node: built-in the sandbox grants (safe-buffer requires
# node:buffer): the worker loads node:process first for it, which Deno's node: modules read
# as they load; a package that requires none starts without that load.
SAFE_BUFFER = "safe-buffer@5.2.1"


def test_a_package_that_requires_a_granted_node_built_in_gets_it() -> None:
    pkgs = packages(SAFE_BUFFER)
    assert pkgs.bundles[0].requires == ("buffer",)
    with pydeno.Runtime(packages=pkgs) as runtime:
        assert runtime.eval('(await import("safe-buffer")).Buffer.from("hi").toString("base64")') == "aGk="
        assert runtime.eval("typeof process") == "undefined"
