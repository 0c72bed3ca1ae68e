"""Runtime: the synchronous driver, end to end against real deno workers."""

from __future__ import annotations

import pytest

import pydeno


def test_eval_returns_the_value_of_the_last_expression() -> None:
    with pydeno.Runtime() as rt:
        assert rt.eval("1 + 1") == 2
