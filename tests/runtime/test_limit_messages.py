"""The messages a newcomer meets from a running worker: a runtime started with its sizes written
as text, and a result or arguments over max_message_bytes, whose fix names the limit. The same
messages made without a worker are tests/unit/test_messages.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pydeno
from pydeno._base import kinds as _taxonomy


# -- sizes as text ------------------------------------------------------------------------------
def test_a_runtime_starts_with_a_size_string() -> None:
    with pydeno.Runtime(max_memory="256MiB", max_message_bytes="1M") as rt:
        assert rt.eval("1 + 1") == 2
        assert (rt._sup.options.max_memory, rt._sup.options.max_message_bytes) == (256 * 2**20, 2**20)


# -- a result over max_message_bytes ------------------------------------------------------------
@pytest.fixture
def small_frames() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(max_message_bytes="2K") as rt:
        yield rt


@pytest.mark.slow
def test_a_result_over_max_message_bytes_gets_a_fix_that_names_the_limit(small_frames: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        small_frames.eval("'x'.repeat(5000)")
    exc = caught.value
    assert exc.kind == "js_error" and pydeno.classify_error(exc).kind == "js_error"
    assert str(exc).startswith("Evaluation failed: RangeError: result could not be converted: value is larger than")
    assert exc.hint == (
        "return less from the code (a smaller value, or the rest in later calls), "
        "or raise max_message_bytes= (now 2048 = 2 KiB)"
    )
    assert f"\nFix: {exc.hint}\n" in exc.__notes__[-1]
    assert len(exc.__notes__) == 1
    # What a model reads: the program's terms and the size, no option.
    assert (
        exc.model_hint
        == "Return less from the program: a smaller value, or the rest in later calls (a value may be at most 2 KiB)"
    )
    assert small_frames.eval("'still alive'") == "still alive"


def test_arguments_over_max_message_bytes_get_a_fix_that_names_the_limit(small_frames: pydeno.Runtime) -> None:
    small_frames.bind_function("f", len)
    with pytest.raises(pydeno.JavaScriptError) as caught:
        small_frames.eval("await f('x'.repeat(5000))")
    assert caught.value.hint == (
        "pass less to f() (a smaller value, or the rest in later calls), or raise max_message_bytes= (now 2048 = 2 KiB)"
    )


def test_the_fix_names_the_hosts_own_limit_not_a_number_the_guest_wrote(small_frames: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        small_frames.eval(
            "throw new RangeError('result could not be converted: "
            "value is larger than max_message_bytes=1 when encoded')"
        )
    assert caught.value.kind == "js_error"
    assert caught.value.hint.endswith("(now 2048 = 2 KiB)")


def test_a_plain_guest_error_keeps_the_generic_fix(small_frames: pydeno.Runtime) -> None:
    with pytest.raises(pydeno.JavaScriptError) as caught:
        small_frames.eval("null.x")
    assert caught.value.hint == _taxonomy.Catalog["js_error"].fix
