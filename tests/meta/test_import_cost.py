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


# Python compiles the generated methods of each dataclass as its class is made, which costs
# every import: the internal value classes are NamedTuples or plain classes instead. ErrorInfo
# stays one, being public: callers may use dataclasses' functions on it.
DATACLASSES_AT_IMPORT: Final = ["pydeno._base.kinds.ErrorInfo"]


def test_importing_pydeno_makes_no_dataclass_but_error_info() -> None:
    script = (
        "import dataclasses, json\n"
        "made = []\n"
        "process = dataclasses._process_class\n"
        "def counted(cls, *args):\n"
        "    made.append(f'{cls.__module__}.{cls.__qualname__}')\n"
        "    return process(cls, *args)\n"
        "dataclasses._process_class = counted\n"
        "import pydeno\n"
        "print(json.dumps(made))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    made = json.loads(out.stdout.splitlines()[-1])
    assert [name for name in made if name.startswith("pydeno")] == DATACLASSES_AT_IMPORT
