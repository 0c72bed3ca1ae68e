"""A thrown value that is not an Error keeps its value: the JavaScriptError carries it exactly
(``.value``, converted like any value and bounded like one) and its message shows it as
``console.log`` would. A hostile thrown value is refused and described, never breaking the
worker or the host."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest

import pydeno

# Real workers: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rt() -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(timeout=20) as runtime:
        yield runtime


def thrown(rt: pydeno.Runtime, code: str) -> pydeno.JavaScriptError:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval(code)
    assert not rt.closed
    return info.value


@pytest.mark.parametrize(
    ("code", "value", "message"),
    [
        ("throw {code: 42}", {"code": 42}, "{ code: 42 }"),
        (
            "throw {code: 42, detail: {retry: false, ids: [1, 2]}}",
            {"code": 42, "detail": {"retry": False, "ids": [1, 2]}},
            "{ code: 42, detail: { retry: false, ids: [ 1, 2 ] } }",
        ),
        ("throw [1, 'two', null]", [1, "two", None], '[ 1, "two", null ]'),
        ("throw 'a plain string'", "a plain string", "a plain string"),
        ("throw 42", 42, "42"),
        ("throw 1.5", 1.5, "1.5"),
        ("throw true", True, "true"),
        ("throw null", None, "null"),
        ("throw undefined", pydeno.undefined, "undefined"),
        ("throw 12345678901234567890n", 12345678901234567890, "12345678901234567890n"),
        ("throw {}", {}, "{}"),
    ],
    ids=["object", "nested", "array", "string", "int", "float", "bool", "null", "undefined", "bigint", "empty"],
)
def test_a_thrown_value_that_is_not_an_error_keeps_its_value(
    rt: pydeno.Runtime, code: str, value: Any, message: str
) -> None:
    exc = thrown(rt, code)
    assert exc.has_value
    assert exc.value == value and type(exc.value) is type(value)
    assert exc.name == ""
    assert exc.message == message
    assert str(exc) == f"Evaluation failed: {message}"
    assert pydeno.classify_error(exc).kind == "js_error"


def test_a_plain_object_with_a_name_and_message_reads_as_them_and_keeps_all_of_its_value(rt: pydeno.Runtime) -> None:
    exc = thrown(rt, "throw {name: 'QuotaError', message: 'over quota', limit: 10}")
    assert str(exc) == "Evaluation failed: QuotaError: over quota"
    assert exc.value == {"name": "QuotaError", "message": "over quota", "limit": 10}


def test_a_rejected_promise_and_a_function_call_keep_the_thrown_value_too(rt: pydeno.Runtime) -> None:
    assert thrown(rt, "await Promise.reject({code: 7})").value == {"code": 7}
    fn = rt.eval("(n) => { throw {code: n} }")
    with pytest.raises(pydeno.JavaScriptError) as info:
        fn(9)
    assert info.value.value == {"code": 9}


def test_a_thrown_error_carries_no_value(rt: pydeno.Runtime) -> None:
    exc = thrown(rt, "throw Object.assign(new TypeError('bad'), {code: 3})")
    assert not exc.has_value and exc.value is None
    assert str(exc) == "Evaluation failed: TypeError: bad"


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        ("const o = {a: 1}; o.self = o; throw o", "value.self is a cycle (it contains itself)"),
        ("throw {get x() { throw new Error('getter refused') }}", "getter refused"),
        ("throw {f() {}}", "value.f is a function, which a thrown value does not carry"),
        ("throw () => 1", "the value is a function, which a thrown value does not carry"),
        ("throw Symbol('s')", "cannot convert a Symbol (the value)"),
        ("throw {s: Symbol('s')}", "cannot convert a Symbol (value.s)"),
        ("throw new (class Secret { #k = 1 })()", "private fields"),
        (
            "throw new Proxy({}, {ownKeys() { throw new Error('trap') }, get() { throw new Error('trap') },"
            " getOwnPropertyDescriptor() { throw new Error('trap') }, getPrototypeOf() { throw new Error('trap') }})",
            "trap",
        ),
        ("let v = 1; for (let i = 0; i < 200; i++) v = [v]; throw v", "nested deeper than 128 levels"),
    ],
    ids=["cycle", "throwing-getter", "method", "function", "symbol", "nested-symbol", "private", "proxy", "deep"],
)
def test_a_thrown_value_that_cannot_be_converted_is_described_and_refused(
    rt: pydeno.Runtime, code: str, refusal: str
) -> None:
    exc = thrown(rt, code)
    assert not exc.has_value and exc.value is None
    assert str(exc).startswith("Evaluation failed: ")
    assert "[the thrown value could not be converted: " in exc.message
    assert refusal in exc.message
    assert pydeno.classify_error(exc).kind == "js_error"
    assert rt.eval("1 + 1") == 2


def test_a_thrown_value_over_the_frame_limit_is_refused_and_its_text_cut() -> None:
    with pydeno.Runtime(max_message_bytes=2**20) as small:
        exc = thrown(small, "throw 'x'.repeat(3 * 2**20)")
        assert not exc.has_value
        assert "value is larger than max_message_bytes=1048576" in exc.message
        assert len(exc.message) < 2**20
        exc = thrown(small, "throw {big: 'y'.repeat(3 * 2**20)}")
        assert not exc.has_value
        assert "value is larger than max_message_bytes=1048576" in exc.message
        assert small.eval("'ok'") == "ok"


def test_a_getter_of_a_thrown_value_that_logs_or_calls_the_host_does_not_garble_the_frame() -> None:
    lines: list[str] = []
    with pydeno.Runtime(on_console=lambda level, text: lines.append(text)) as logged:
        logged.bind_function("ping", lambda: "pong")
        exc = thrown(logged, "throw {get a() { console.log('read a'); return 1 }, b: 2}")
        assert exc.value == {"a": 1, "b": 2}
        assert "read a" in lines
        # The same getter in a result, and one that calls a host function while it is read.
        assert logged.eval("({get a() { console.log('read again'); return 1 }})") == {"a": 1}
        assert "read again" in lines
        exc = thrown(logged, "throw {get a() { ping(); return 1 }}")
        assert not exc.has_value
        assert "a host function cannot be called while a value is being converted" in exc.message
        assert logged.eval("await ping()") == "pong"


def test_a_javascript_error_with_a_thrown_value_pickles_with_it(rt: pydeno.Runtime) -> None:
    exc = thrown(rt, "throw {code: 42, when: new Date(0), raw: new Uint8Array([1, 2]), nothing: undefined}")
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is pydeno.JavaScriptError
    assert copy.has_value and copy.value == exc.value
    assert copy.value["nothing"] is pydeno.undefined
    assert str(copy) == str(exc)
    assert copy.__notes__ == exc.__notes__


def test_code_mode_shows_the_thrown_value_to_the_model() -> None:
    with pydeno.CodeMode(tools=[]) as cm:
        result = cm.execute("throw {code: 'E_QUOTA', retry_after: 30}")
    assert not result.ok
    assert result.error is not None
    assert result.error["value"] == {"code": "E_QUOTA", "retry_after": 30}
    assert result.to_dict()["error"]["value"] == {"code": "E_QUOTA", "retry_after": 30}
    assert "E_QUOTA" in result.to_json()


def test_code_mode_leaves_out_a_thrown_value_over_max_output_chars_and_says_the_error_was_cut() -> None:
    with pydeno.CodeMode(tools=[], max_output_chars=200) as cm:
        result = cm.execute("throw {items: Array.from({length: 100}, (_, i) => i)}")
    assert result.error is not None
    assert "value" not in result.error
    assert "error" in result.truncated
    assert result.error["message"].startswith("{ items: [")
