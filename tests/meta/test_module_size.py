"""The package's own layout: no module under pydeno/ is over 700 lines, so each can hold one job.

The generated sync twins (``_sync.py``, written by scripts/unasync.py) mirror their async
source and are not counted. A module over the bound is listed below only with its reason; an
entry that is no longer over the bound must leave the list, so the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

PACKAGE: Final = Path(__file__).resolve().parents[2] / "pydeno"
MAX_LINES: Final = 700
TWIN: Final = "_sync.py"
OVER: Final[dict[str, str]] = {}


def line_counts() -> dict[str, int]:
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != TWIN
    }


def test_no_module_is_over_700_lines_unless_listed_with_its_reason() -> None:
    over = {name: n for name, n in line_counts().items() if n > MAX_LINES and name not in OVER}
    assert over == {}, f"split these along a seam, one job a module: {over}"


def test_every_listed_module_is_still_over_the_bound() -> None:
    counts = line_counts()
    done = sorted(name for name in OVER if counts.get(name, 0) <= MAX_LINES)
    assert done == [], f"no longer over {MAX_LINES} lines: remove them from OVER: {done}"
