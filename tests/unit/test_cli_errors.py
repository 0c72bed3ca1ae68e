"""``pydeno errors KIND`` with a misspelt kind: a non-zero exit that names the nearest kinds."""

from __future__ import annotations

import pytest

from pydeno._base.kinds import Catalog
from pydeno._cli import main as cli


def errors(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(["errors", *argv])
    out, err = capsys.readouterr()
    assert isinstance(exited.value.code, int)
    return exited.value.code, out, err


@pytest.mark.parametrize(
    ("typed", "nearest"),
    [
        ("timeoutt", "'timeout'"),
        ("memory-limit", "'memory_limit'"),
        ("Timeout", "'timeout'"),
        ("js-error", "'js_error'"),
        ("memory", "'memory_limit'"),
    ],
)
def test_a_misspelt_kind_exits_non_zero_and_names_the_nearest_kind(
    capsys: pytest.CaptureFixture[str], typed: str, nearest: str
) -> None:
    status, out, err = errors(capsys, typed)
    assert status == 2
    assert out == ""
    assert f"unknown kind {typed!r}; did you mean {nearest}" in err
    # The whole list still follows, for a reader who meant none of them.
    assert ", ".join(Catalog) in err


def test_a_kind_close_to_several_names_each_of_them(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = errors(capsys, "tool")
    assert status == 2
    line = next(line for line in err.splitlines() if "unknown kind" in line)
    suggested = line.split("did you mean ", 1)[1].split("?", 1)[0]
    assert suggested.count("'tool_") >= 2, line


def test_a_kind_close_to_none_lists_the_kinds_without_a_guess(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = errors(capsys, "zzzzzz")
    assert status == 2 and out == ""
    assert "did you mean" not in err
    assert f"unknown kind 'zzzzzz'; the kinds are: {', '.join(Catalog)}" in err


def test_a_misspelt_kind_with_json_also_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = errors(capsys, "--json", "timeoutt")
    assert status == 2 and out == ""
    assert "did you mean 'timeout'" in err
