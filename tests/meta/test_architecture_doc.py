"""docs/architecture.md names the code as it is: every module it names exists, and its
table of the host's modules lists each module of pydeno/host, so the page cannot drift from
the layout unseen."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PAGE: Final = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
HOST: Final = ROOT / "pydeno" / "host"
# A module as the page writes it: a path ending in .py, relative to the checkout, to pydeno/
# or to pydeno/host/ (the host's table and the picture write them so).
_NAMED: Final = re.compile(r"(?<![\w/.])((?:[\w.]+/)*[\w]+\.py)\b")


def named_modules() -> set[str]:
    return set(_NAMED.findall(PAGE))


def resolves(name: str) -> bool:
    if "/" not in name:
        # A bare name stands in a folder's list ("_base/: errors.py, kinds.py, ..."): some
        # module of the package has it.
        return any((ROOT / "pydeno").rglob(name))
    return any((base / name).is_file() for base in (ROOT, ROOT / "pydeno", HOST, ROOT / "pydeno" / "_runtime"))


def test_every_module_the_page_names_exists() -> None:
    missing = sorted(name for name in named_modules() if not resolves(name))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_table_of_the_host_s_modules_lists_every_one() -> None:
    rows = set(re.findall(r"^\| `([\w/]+\.py)` \|", PAGE, flags=re.M))
    modules = {str(path.relative_to(HOST)) for path in HOST.rglob("*.py") if path.name != "__init__.py"}
    assert rows == modules, f"missing rows: {sorted(modules - rows)}; rows of no module: {sorted(rows - modules)}"
