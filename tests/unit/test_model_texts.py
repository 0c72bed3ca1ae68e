"""Two readers, two texts, as the catalog writes them: every kind has a text for a model that
names no option, its page says both texts, the command line prints both, each limit's factory
tells a model the value and never the option, and describe() names no option. The texts of
failures produced for real are tests/features/test_model_messages.py."""

from __future__ import annotations

import pytest

import pydeno
from pydeno._base import failures
from pydeno._base.kinds import Catalog
from pydeno._cli.pages import kind_page
from tests.support.model_checks import OPTION, MiB, lookup


@pytest.mark.parametrize("kind", list(Catalog))
def test_every_kind_has_a_text_for_the_model_that_names_no_option(kind: str) -> None:
    text = Catalog[kind].model_fix
    assert text and text != Catalog[kind].fix
    assert not OPTION.search(text), text


@pytest.mark.parametrize("kind", list(Catalog))
def test_every_kind_page_says_both_texts(kind: str) -> None:
    page = kind_page(kind)
    assert f"## Fix (for the operator)\n\n{Catalog[kind].fix}\n" in page
    assert f"## What the program can change (for a model)\n\n{Catalog[kind].model_fix}\n" in page


def test_the_cli_prints_both_texts_of_a_kind(capsys: pytest.CaptureFixture[str]) -> None:
    from pydeno._cli.main import main

    assert main(["errors", "memory_limit"]) == 0
    out = capsys.readouterr().out
    assert Catalog["memory_limit"].fix in out and Catalog["memory_limit"].model_fix in out


def test_each_limit_factory_tells_the_model_the_limit_value_and_never_the_option() -> None:
    cases: list[tuple[Exception, str]] = [
        (failures.command_timed_out(1.0), "(its limit is 1 s per run)"),
        (failures.cpu_in_command(0.5), "(its limit is 0.5 s of CPU per run)"),
        (failures.host_wait_exceeded(2.0), "(its limit is 2 s of waiting per run)"),
        (failures.over_memory(2 * 64 * MiB, 64 * MiB), "(its limit is 64 MiB)"),
        (failures.heap_exhausted(64 * MiB), "(its limit is 64 MiB)"),
        (failures.over_threads(70, 64), "(its limit is 64 threads)"),
        (failures.host_calls_exceeded(10), "(its limit is 10 calls per run)"),
        (failures.cpu_between_commands(0.25, 1.0), "more than 0.25 s of CPU"),
    ]
    for exc, value in cases:
        model_hint = exc.model_hint  # type: ignore[attr-defined]
        assert value in model_hint, model_hint
        assert not OPTION.search(model_hint), model_hint
        # The operator's text keeps the option and its value.
        assert "=" in exc.hint  # type: ignore[attr-defined]


def test_describe_names_no_option_of_the_operator() -> None:
    text = pydeno.CodeMode([lookup], max_tool_calls=3).describe()
    rules = text.split("\nTools:\n")[0]
    assert not OPTION.search(rules), rules
    assert "At most 3 tool calls per run." in rules
    assert "returns an error whose `hint` says what the program can change" in rules
