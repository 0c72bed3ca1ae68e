"""A journal says whether a Code Mode session wrote it, and an agent's journal is written as it
was before Code Mode sessions existed (no worker: the journal format alone)."""

from __future__ import annotations

import msgpack
import pytest

from pydeno import JournalError
from pydeno._agents.core import SessionCore
from pydeno._agents.journal import decode, decode_journal, encode, seal_journal
from pydeno._tools.bridge import ToolBridge

KEY = b"k" * 32
FIELDS = {"seed", "clock_ms", "max_tool_calls", "spent", "runs", "pending"}


def body_of(journal: bytes) -> dict[str, object]:
    body = decode(msgpack.unpackb(journal, raw=False)[3])
    assert isinstance(body, dict)
    return body


def test_an_agent_sessions_journal_has_only_the_fields_it_always_had() -> None:
    journal = SessionCore(ToolBridge({}), expose_errors=False, seed=1, clock_ms=2).dump(KEY)
    assert set(body_of(journal)) == FIELDS
    assert decode_journal(journal, KEY).code_mode is False


def test_a_code_mode_sessions_journal_says_so_and_reads_back_as_such() -> None:
    journal = SessionCore(ToolBridge({}), expose_errors=False, seed=1, clock_ms=2, code_mode=True).dump(KEY)
    assert body_of(journal)["code_mode"] is True
    assert decode_journal(journal, KEY).code_mode is True


@pytest.mark.parametrize("value", [False, 1, "yes"])
def test_a_code_mode_field_that_is_not_true_is_refused_even_when_signed(value: object) -> None:
    fields = {"seed": 1, "clock_ms": 2, "max_tool_calls": None, "spent": 0, "runs": [], "pending": None}
    journal = seal_journal(KEY, "journal", encode({**fields, "code_mode": value}))
    with pytest.raises(JournalError) as refused:
        decode_journal(journal, KEY)
    assert str(refused.value) == "journal is malformed: code_mode"
