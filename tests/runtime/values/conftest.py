"""The value suites' runtime, shared by the tests of one module.

pytest sets up higher-scoped fixtures before function-scoped ones, so that runtime exists
before the first test's leak guard (``conftest.no_leaks``) takes its baseline and is closed only
after the last test's guard has run: it is part of every test's baseline and never counts as a
leak. Tests that need their own options, poison the guest's built-ins or close the runtime start
their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import pydeno
from tests.runtime.values.value_checks import KIND_JS, Box


@pytest.fixture(scope="module")
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime() as runtime:
        runtime.eval(KIND_JS)
        runtime.bind_function("take", lambda: Box.value)
        yield runtime


@pytest.fixture(scope="module")
def ident(rt: pydeno.Runtime) -> pydeno.JsFunction:
    fn = rt.eval("(x) => x")
    assert isinstance(fn, pydeno.JsFunction)
    return fn


@pytest.fixture
def ext_codes(rt: pydeno.Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The extension type codes the host decodes, to tell which lane a result took."""
    codec = rt._sup.core.codec
    seen: list[int] = []
    real = codec._ext_hook

    def spy(code: int, data: bytes, *rest: Any) -> Any:
        seen.append(code)
        return real(code, data, *rest)

    monkeypatch.setattr(codec, "_ext_hook", spy)
    return seen
