"""Every ```python block in README.md and docs/ (docs/errors/ included) runs as it stands.

The convention the pages follow:

- The blocks of one page run in order in one namespace, the way a reader pastes them top to
  bottom into one session: a later block may use a name an earlier block of the same page
  defined. Each page starts from a fresh namespace.
- A comment line ``# <text>`` right after a ``print(...)`` line is output that block must print
  (one of its stdout lines equals ``<text>``). A comment on the print line itself is prose.
- A block that cannot run as it stands (it needs a model provider, another machine, a cluster,
  a client's configuration, or it shows the shape of a call only) starts with ``# fragment``
  or ``# fragment: <why>``, visible to the reader; it is only compiled. Fragments are the
  exception: a snippet defines what it uses in a line or two where it can.
- A runnable block needs no network (a server it needs, it starts on loopback itself), closes
  what it opens and finishes in a few seconds; the leak guard of conftest.py checks the first.
- Blocks of other languages (```sh, ```console, ```ts, ```json, ```text) are not run; only the
  ``pydeno ...`` command lines in the ```sh and ```console blocks of README.md and
  docs/quickstart.md are parsed by the command line's own parsers, so that a renamed
  subcommand or flag shows up here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

import pydeno
from pydeno._cli import main as cli
from tests.support.otel import reset_global_provider

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_PYTHON = re.compile(r"^```python\n(.*?)^```[ \t]*$", re.S | re.M)
_SHELL = re.compile(r"^```(?:sh|console)\n(.*?)^```[ \t]*$", re.S | re.M)
_FRAGMENT = re.compile(r"# fragment(?::.*)?")
_EXPECTED = re.compile(r"print\([^\n]*\n[ \t]*# (.*)")


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first line of code in the page
    code: str

    @property
    def fragment(self) -> bool:
        first = self.code.split("\n", 1)[0]
        return _FRAGMENT.fullmatch(first.strip()) is not None

    def compiled(self) -> Any:
        # Padding with blank lines puts a traceback's line numbers on the page's own lines.
        # dont_inherit: the block runs as pasted, without this module's __future__ imports.
        return compile("\n" * (self.line - 1) + self.code, str(self.page), "exec", dont_inherit=True)

    def expected(self) -> list[str]:
        return _EXPECTED.findall(self.code)


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(page, text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in _PYTHON.finditer(text)]


def run_page(page: Path) -> None:
    """Run a page's blocks in order in one fresh namespace; compile its fragments only."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    try:
        for block in blocks(page):
            code = block.compiled()
            if block.fragment:
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
            printed = out.getvalue().splitlines()
            for line in block.expected():
                assert line in printed, f"{page.name}:{block.line}: expected {line!r} among {printed}"
    finally:
        # A page that traces sets the process's tracer provider, as a reader's service would.
        reset_global_provider()


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else page.name


PAGES = [page for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))] if blocks(page)]


def test_the_readme_and_the_guides_are_among_the_pages_that_run() -> None:
    ids = {_page_id(page) for page in PAGES}
    assert {"README.md", "agents.md", "quickstart.md", "async.md"} <= ids


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_python_block_of_a_page_runs_in_order_and_prints_what_its_comments_say(page: Path) -> None:
    run_page(page)


# -- the rules themselves, on pages written here ---------------------------------------


def _page(tmp_path: Path, *codes: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text("".join(f"Some prose.\n\n```python\n{code}```\n\n" for code in codes))
    return page


def test_a_later_block_uses_a_name_an_earlier_block_of_the_same_page_defined(tmp_path: Path) -> None:
    run_page(_page(tmp_path, "answer = 42\n", "print(answer)\n# 42\n"))


def test_a_page_does_not_see_the_names_another_page_defined(tmp_path: Path) -> None:
    run_page(_page(tmp_path, "answer = 42\n"))
    with pytest.raises(NameError, match="answer"):
        run_page(_page(tmp_path, "print(answer)\n"))


def test_a_block_that_prints_other_than_its_comment_says_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="'43'"):
        run_page(_page(tmp_path, "print(6 * 7)\n# 43\n"))


def test_a_comment_on_the_print_line_itself_is_prose_not_expected_output(tmp_path: Path) -> None:
    run_page(_page(tmp_path, "print(6 * 7)  # the answer\n"))


def test_a_block_marked_as_a_fragment_is_compiled_but_not_run(tmp_path: Path) -> None:
    run_page(_page(tmp_path, "# fragment: needs a model provider\nagent.run_sync('hi')\n"))
    with pytest.raises(SyntaxError):
        run_page(_page(tmp_path, "# fragment\npool.eval(code, *, timeout=None)\n"))


def test_a_fragment_marker_counts_only_on_the_first_line(tmp_path: Path) -> None:
    with pytest.raises(NameError, match="agent"):
        run_page(_page(tmp_path, "x = 1\n# fragment\nagent.run_sync('hi')\n"))


def test_a_failing_block_reports_the_line_of_the_page_it_is_on(tmp_path: Path) -> None:
    page = _page(tmp_path, "x = 1\n", "y = 2\nraise ValueError\n")
    with pytest.raises(ValueError) as caught:
        run_page(page)
    assert caught.traceback[-1].path == page
    assert caught.traceback[-1].lineno == page.read_text().split("\n").index("raise ValueError")


# -- command lines ---------------------------------------------------------------------


def _command_lines(page: Path) -> list[list[str]]:
    found = []
    for body in _SHELL.findall(page.read_text()):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words and Path(words[0]).name == "pydeno":
                found.append(words[1:])
            elif words[1:3] == ["-m", "pydeno"]:
                found.append(words[3:])
    return found


def check_command(args: list[str]) -> None:
    """Parse the arguments of a ``pydeno ...`` line as the command line would (SystemExit if
    they are not valid), without running the command."""
    if args[:1] == ["mcp"]:
        cli._mcp_parser().parse_args(args[1:])
    # The parsers of doctor and errors are built inside the commands, which do the work once
    # they parse: their few arguments are checked here.
    elif args[:1] == ["doctor"]:
        assert args[1:] in ([], ["--json"]), args
    elif args[:1] == ["errors"]:
        kinds = [arg for arg in args[1:] if arg != "--json"]
        assert len(kinds) <= 1 and set(kinds) <= set(pydeno.KINDS), args
    else:
        cli._eval_parser().parse_args(args)


def test_the_pydeno_command_lines_of_the_readme_and_the_quickstart_parse() -> None:
    commands = [args for page in (ROOT / "README.md", DOCS / "quickstart.md") for args in _command_lines(page)]
    assert ["mcp", "--session"] in commands
    for args in commands:
        check_command(args)


def test_a_command_line_with_a_flag_the_command_does_not_take_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\npydeno mcp --sesion   # a typo\n.venv/bin/python -m pydeno '1 + 1' --jsn\npydeno doctor -v\n```\n"
    )
    commands = _command_lines(page)
    assert commands == [["mcp", "--sesion"], ["1 + 1", "--jsn"], ["doctor", "-v"]]
    for args in commands:
        with pytest.raises((SystemExit, AssertionError)):
            check_command(args)
