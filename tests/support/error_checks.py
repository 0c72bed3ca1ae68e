"""What the error-kind suites share: how a scenario's failure is caught, and the check that
an exception is explained as the catalog says (tests/features/test_error_kinds.py,
tests/security/test_error_forgery.py, tests/runtime/test_error_evidence.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import pydeno
from pydeno._base.docs_links import docs_page

FakeWorker = Callable[..., None]
Launcher = Callable[..., None]
GUEST_DIED = "worker died running guest code ("


def failure(action: Callable[[], object]) -> Exception:
    """The exception action raised; fail the test if it raised none."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - the exception is what the scenario produces
        return exc
    pytest.fail("the scenario did not fail")


def eval_failure(code: str, **options: Any) -> Exception:
    with pydeno.Runtime(**options) as rt:
        exc = failure(lambda: rt.eval(code))
        if not isinstance(exc, pydeno.JavaScriptError):
            assert rt.closed
        return exc


def assert_explained(exc: BaseException, kind: str, *, via_agent: bool = False) -> pydeno.ErrorInfo:
    """exc classifies as kind, agrees with the catalog, and (a pydeno error) carries the
    same kind, its hint, its page and a note that str(exc) does not contain."""
    info = pydeno.classify_error(exc, via_agent=via_agent)
    assert info.kind == kind
    assert (info.retryable, info.retry_with_larger_limits, info.summary) == pydeno.KINDS[kind]
    assert info.to_dict() == {
        "kind": kind,
        "retryable": info.retryable,
        "summary": info.summary,
        "retry_with_larger_limits": info.retry_with_larger_limits,
    }
    if isinstance(exc, pydeno.PydenoError):
        # An exception does not know it came out of an agent run: its own attributes are
        # those of the kind without via_agent (host_wait for max_pause).
        own = pydeno.classify_error(exc).kind
        assert exc.kind == own
        assert isinstance(exc.hint, str) and exc.hint
        assert exc.docs == docs_page(own) == f"pydeno errors {own}"
        note = exc.__notes__[0]
        assert note.startswith(f"Kind: {own} (")
        assert f"\nFix: {exc.hint}\n" in note
        assert note.endswith(f"\nDocs: {exc.docs}")
        assert ("retryable: yes" in note) == pydeno.KINDS[own][0]
        assert note not in str(exc)
        assert "Kind: " not in str(exc) and "Docs: " not in str(exc)
    return info
