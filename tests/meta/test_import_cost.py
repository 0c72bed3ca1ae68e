"""``import pydeno`` loads what an eval needs and nothing else: JSON Schema, anyio and asyncio,
SQLite, the HTTP client, the MCP SDK, package metadata and the features' own modules load on
first use of the names that need them; the agent frameworks' integrations, only when imported
by name."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Final

# Top-level modules, and pydeno's feature packages, an eval-only service never needs.
NOT_FOR_AN_EVAL: Final = (
    "anyio",
    "asyncio",
    "decimal",
    "email",
    "httpx",
    "importlib.metadata",
    "agents",
    "jsonschema",
    "langchain_core",
    "mcp",
    "msgspec",
    "pydantic",
    "sqlite3",
    "ssl",
    "pydeno._agents",
    "pydeno._code_mode",
    "pydeno._pools",
    "pydeno._tools",
    "pydeno.langchain",
    "pydeno.openai_agents",
    "pydeno.pydantic_ai",
)


def loaded_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(name for name in NOT_FOR_AN_EVAL if any(m == name or m.startswith(name + ".") for m in modules))


def test_importing_pydeno_loads_none_of_what_only_features_need() -> None:
    assert heavy(loaded_after("import pydeno")) == []


def test_a_feature_name_loads_its_modules_on_first_use() -> None:
    loaded = loaded_after("import pydeno\npydeno.CodeMode")
    assert {"jsonschema", "pydeno._code_mode._sync", "pydeno._tools.tool"} <= loaded


def test_every_public_name_resolves_and_star_import_gives_all_of_them() -> None:
    namespace: dict[str, object] = {}
    exec("from pydeno import *", namespace)
    import pydeno

    assert sorted(name for name in namespace if not name.startswith("__")) == sorted(pydeno.__all__)
    assert all(getattr(pydeno, name) is namespace[name] for name in pydeno.__all__)
    assert set(pydeno.__all__) <= set(dir(pydeno))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    import pydeno

    try:
        pydeno.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert str(exc) == "module 'pydeno' has no attribute 'NoSuchThing'"
    else:
        raise AssertionError("pydeno.NoSuchThing resolved")


# Modules an eval may need, but not at import: an option that needs them (a seed, packages=),
# a refusal that suggests a name, a host function that returns an awaitable, the first start
# (which hashes the worker's sources to stage them). The dataclasses module compiles the
# generated methods of each class as it is made, and loads inspect and ast: the package's own
# classes are NamedTuples or plain classes. hashlib loads OpenSSL's bindings, and the npm
# resolver and the declarations' reader compile their patterns: they load with the first
# Packages made, which options.py only names.
NOT_AT_IMPORT: Final = (
    "ast",
    "dataclasses",
    "difflib",
    "hashlib",
    "inspect",
    "pydeno._base.package_resolver",
    "pydeno._base.package_types",
    "secrets",
)


def test_importing_pydeno_leaves_to_first_use_what_only_a_start_or_an_option_needs() -> None:
    loaded = loaded_after("import pydeno")
    assert sorted(name for name in NOT_AT_IMPORT if name in loaded) == []
