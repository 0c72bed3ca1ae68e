"""The examples in docs/ run as written: each ```python block marked as run by the tests."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"This example is run by the tests[^\n]*\n\n```python\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for number, code in enumerate(_BLOCK.findall(page.read_text()), 1):
            found.append((f"{page.name}#{number}", code))
    return found


def test_the_docs_have_examples_to_run() -> None:
    assert any(name.startswith("agents.md") for name, _ in examples())


@pytest.mark.parametrize(("name", "code"), examples(), ids=[name for name, _ in examples()])
def test_a_docs_example_runs_and_prints_what_its_comments_say(name: str, code: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        # dont_inherit: the example runs as pasted, without this module's __future__ imports.
        exec(compile(code, name, "exec", dont_inherit=True), {"__name__": "__docs__"})
    printed = out.getvalue().splitlines()
    # A comment line "# <text>" right after a print(...) line is the output it must give.
    expected = [m.group(1) for m in re.finditer(r"print\([^\n]*\n\s*# (.*)", code)]
    for line in expected:
        assert line in printed, (line, printed)
    assert printed
