"""host/wire/connection: the sans-I/O protocol state, fed bytes directly (no process)."""

from __future__ import annotations

import inspect
import json
import struct
import sys
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pydeno import JavaScriptError, undefined
from pydeno.host.wire.codec import Codec, json_depth
from pydeno.host.wire.connection import (
    Completed,
    Connection,
    Console,
    Event,
    Hello,
    HostCall,
    ProtocolError,
    clean_text,
    frame,
)
from pydeno.host.wire.protocol import EXT_JSON, PROTOCOL_VERSION

MiB = 2**20
HELLO = [0, PROTOCOL_VERSION, "2.0.0", "13.0", []]


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def wire(value: Any) -> bytes:
    return frame(pack(value))


def connection(max_message_bytes: int = MiB) -> Connection:
    codec = Codec(lambda function_id: ("function", function_id), lambda value: None, max_message_bytes)
    return Connection(codec, max_message_bytes)  # type: ignore[arg-type]


def shaken(max_message_bytes: int = MiB) -> Connection:
    """A connection that has seen a good handshake."""
    conn = connection(max_message_bytes)
    conn.feed(wire(HELLO))
    assert isinstance(conn.next_event(), Hello)
    return conn


def events(conn: Connection) -> list[Event]:
    found = []
    while (event := conn.next_event()) is not None:
        found.append(event)
    return found


# -- framing: any split of the byte stream gives the same events --------------------------------
def _conversation() -> tuple[Connection, bytes]:
    """A connection with three requests in flight and the worker's bytes answering them."""
    conn = connection()
    conn.eval("1")
    conn.eval("2")
    conn.bind("f")
    stream = b"".join(
        [
            wire(HELLO),
            wire([4, "log", "hi\x1b[0m"]),
            wire([1, 1, {"a": [1, 2.5, "x"], "b": msgpack.ExtType(0, b"\x00"), "c": b"\x00\xff"}]),
            wire([2, 2, "RangeError", "too far", "at <eval>:1", []]),
            wire([1, 3, None]),
            wire([3, 1, "f", [1, "two"]]),
            wire([4, "warn", "é€😀"]),
        ]
    )
    return conn, stream


EXPECTED_EVENTS = [
    Hello(PROTOCOL_VERSION, "2.0.0", "13.0"),
    Console("log", "hi[0m"),
    Completed(1),
    Completed(2),
    Completed(3),
    HostCall(1, "f", [1, "two"]),
    Console("warn", "é€😀"),
]


def _replay(chunks: list[bytes]) -> tuple[list[Event], Any, tuple[str, str, str], Any]:
    conn, _ = _conversation()
    seen: list[Event] = []
    for chunk in chunks:
        conn.feed(chunk)
        seen.extend(events(conn))
    with pytest.raises(JavaScriptError) as info:
        conn.take(2)
    return seen, conn.take(1), (info.value.name, info.value.message, info.value.stack), conn.take(3)


def test_a_whole_stream_gives_each_event_in_order() -> None:
    _, stream = _conversation()
    seen, value, error, bound = _replay([stream])
    assert seen == EXPECTED_EVENTS
    assert value == {"a": [1, 2.5, "x"], "b": undefined, "c": b"\x00\xff"}
    assert error == ("RangeError", "too far", "at <eval>:1")
    assert bound is None


def test_splitting_the_stream_at_any_byte_gives_the_same_events() -> None:
    _, stream = _conversation()
    whole = _replay([stream])
    for cut in range(len(stream) + 1):
        assert _replay([stream[:cut], stream[cut:]]) == whole, cut


def test_splitting_the_stream_in_three_pieces_gives_the_same_events() -> None:
    _, stream = _conversation()
    whole = _replay([stream])
    for first in range(0, len(stream) + 1, 3):
        for second in range(first, len(stream) + 1):
            assert _replay([stream[:first], stream[first:second], stream[second:]]) == whole, (first, second)


def test_feeding_one_byte_at_a_time_gives_the_same_events() -> None:
    _, stream = _conversation()
    assert _replay([stream[i : i + 1] for i in range(len(stream))]) == _replay([stream])


def test_a_long_stream_of_large_frames_parses_in_any_chunking() -> None:
    # Frames over 64 KiB make the connection compact its buffer while parsing.
    texts = [chr(ord("a") + i) * (100_000 + i) for i in range(6)]
    stream = wire(HELLO) + b"".join(wire([4, "log", text]) for text in texts)
    for size in (1, 4093, 65536, 300_000, len(stream)):
        conn = connection()
        seen: list[Event] = []
        for start in range(0, len(stream), size):
            conn.feed(stream[start : start + size])
            seen.extend(events(conn))
        assert seen == [Hello(PROTOCOL_VERSION, "2.0.0", "13.0"), *(Console("log", text) for text in texts)], size


def test_a_partial_frame_is_not_an_event_until_its_last_byte_arrives() -> None:
    data = wire(HELLO)
    for end in range(len(data)):
        conn = connection()
        conn.feed(data[:end])
        assert conn.next_event() is None
        conn.feed(data[end:])
        assert conn.next_event() == Hello(PROTOCOL_VERSION, "2.0.0", "13.0")


# -- refused shapes ----------------------------------------------------------------------------
def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _result_raw(raw_value: bytes) -> bytes:
    return frame(b"\x93\x01\x01" + raw_value)


REFUSED_AFTER_HANDSHAKE = [
    # (bytes, malformed, detail)
    pytest.param(frame(b"\xc1"), True, "FormatError: ", id="not-msgpack"),
    pytest.param(frame(b""), True, "ValueError: Unpack failed: incomplete input", id="empty"),
    pytest.param(frame(pack([1, 1, 1]) + b"\x00"), True, "ExtraData", id="trailing-bytes"),
    pytest.param(_result_raw(b"\xdd\x7f\xff\xff\xff"), True, f"exceeds max_array_len({MiB})", id="array-length-lie"),
    # The host allows two levels beyond 128: the frame's own array and a host call's argument list.
    pytest.param(wire([1, 1, _nested(130)]), True, "a value is nested deeper than 128 levels", id="deep-130"),
    pytest.param(wire([1, 1, _nested(1000)]), True, "a value is nested deeper than 128 levels", id="deep-1000"),
    # Too costly to decode before it is too deep: refused before msgspec or msgpack build it.
    pytest.param(_result_raw(b"\x91" * 100_000 + b"\x90"), False, "would take about", id="deep-100000"),
    pytest.param(wire([1, 1, msgpack.ExtType(42, b"")]), True, "unknown extension type 42", id="unknown-ext"),
    pytest.param(wire([1, 1, msgpack.ExtType(1, b"\x05ff")]), True, "malformed BigInt", id="bigint-sign"),
    pytest.param(wire([1, 1, msgpack.ExtType(1, b"\x00")]), True, "malformed BigInt", id="bigint-empty"),
    pytest.param(wire([1, 1, msgpack.ExtType(2, b"\x00" * 9)]), True, "malformed Date", id="date-long"),
    pytest.param(
        wire([1, 1, msgpack.ExtType(2, struct.pack(">d", -8.64e20))]),
        True,
        "Date outside the range of datetime",
        id="date-far-past",
    ),
    pytest.param(wire([1, 1, msgpack.ExtType(2, struct.pack(">d", float("inf")))]), True, "malformed Date", id="inf"),
    pytest.param(_result_raw(b"\xa3a\xffb"), True, "UnicodeDecodeError", id="invalid-utf8"),
    pytest.param(wire({"kind": 1}), False, "a frame is not an array starting with a kind", id="map"),
    pytest.param(wire(1), False, "a frame is not an array starting with a kind", id="scalar"),
    pytest.param(wire([]), False, "a frame is not an array starting with a kind", id="empty-array"),
    pytest.param(wire([True, 1, 1]), False, "a frame is not an array starting with a kind", id="bool-kind"),
    pytest.param(wire([1.0, 1, 1]), False, "a frame is not an array starting with a kind", id="float-kind"),
    pytest.param(wire([7, 1, 1]), False, "unexpected frame of kind 7 with 3 items", id="unknown-kind"),
    pytest.param(wire([-1]), False, "unexpected frame of kind -1 with 1 items", id="negative-kind"),
    pytest.param(wire([1, 1, 1, 1]), False, "unexpected frame of kind 1 with 4 items", id="result-arity"),
    pytest.param(wire([1, True, 1]), False, "unexpected frame of kind 1 with 3 items", id="result-bool-id"),
    pytest.param(wire([2, 1, "E", "m", None, []]), False, "unexpected frame of kind 2 with 6 items", id="error-stack"),
    pytest.param(wire([2, 1, "E", "m", ""]), False, "unexpected frame of kind 2 with 5 items", id="error-no-thrown"),
    pytest.param(
        wire([2, 1, "E", "m", "", None]), False, "unexpected frame of kind 2 with 6 items", id="error-thrown-nil"
    ),
    pytest.param(
        wire([2, 1, "E", "m", "", [1, 2]]), False, "unexpected frame of kind 2 with 6 items", id="error-thrown-two"
    ),
    pytest.param(
        wire([2, 1, "E", "m", "", {"a": 1}]), False, "unexpected frame of kind 2 with 6 items", id="error-thrown-map"
    ),
    pytest.param(wire([3, 1, 5, []]), False, "unexpected frame of kind 3 with 4 items", id="hostcall-name"),
    pytest.param(wire([4, "trace", "x"]), False, "unexpected frame of kind 4 with 3 items", id="console-level"),
    pytest.param(wire([4, ["log"], "x"]), False, "unexpected frame of kind 4 with 3 items", id="console-list-level"),
    pytest.param(wire([4, {"a": 1}, "x"]), False, "unexpected frame of kind 4 with 3 items", id="console-map-level"),
    pytest.param(wire(HELLO), False, "unexpected frame of kind 0 with 5 items", id="second-hello"),
    pytest.param(wire([1, 99, None]), False, "an answer to request 99, which is not pending", id="unknown-result"),
    pytest.param(
        wire([2, 99, "E", "m", "", []]), False, "an answer to request 99, which is not pending", id="unknown-err"
    ),
    pytest.param(wire([3, 1, "g", []]), False, "host call to 'g', which was never bound", id="unbound-call"),
]


@pytest.mark.parametrize(("data", "malformed", "detail"), REFUSED_AFTER_HANDSHAKE)
def test_a_refused_frame_after_the_handshake_raises_protocol_error(data: bytes, malformed: bool, detail: str) -> None:
    conn = shaken()
    conn.eval("1")
    conn.feed(data)
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    assert info.value.malformed is malformed
    assert detail in info.value.detail
    prefix = "worker sent a malformed frame (" if malformed else "worker broke protocol: "
    assert info.value.crash_message().startswith(prefix)


REFUSED_HANDSHAKES = [
    pytest.param([0, 6, "2.0.0", "13.0", []], "protocol version 6, expected 5", id="protocol-6"),
    pytest.param([0, 4, "2.0.0", "13.0", []], "protocol version 4, expected 5", id="protocol-4"),
    pytest.param([0, 1, "2.0.0", "13.0", []], "protocol version 1, expected 5", id="protocol-1"),
    pytest.param([0, PROTOCOL_VERSION, "2.0.0", None, []], "a malformed handshake", id="v8-none"),
    pytest.param([0, PROTOCOL_VERSION, "2.0.0", "13.0", None], "a malformed handshake", id="breaches-none"),
    pytest.param([0, PROTOCOL_VERSION, "2.0.0", "13.0", [1]], "a malformed handshake", id="breach-int"),
    pytest.param([0, PROTOCOL_VERSION, "2.0.0", "13.0", ["x"] * 33], "a malformed handshake", id="breaches-too-many"),
    pytest.param([0, PROTOCOL_VERSION, b"2.0.0", "13.0", []], "a malformed handshake", id="deno-bytes"),
    pytest.param([0, "2", "2.0.0", "13.0", []], "unexpected frame of kind 0 with 5 items", id="protocol-str"),
    pytest.param([0, PROTOCOL_VERSION, "2.0.0", "13.0"], "unexpected frame of kind 0 with 4 items", id="short"),
    pytest.param([1, 1, None], "the first frame was not a handshake", id="result-first"),
    pytest.param([4, "log", "hello"], "the first frame was not a handshake", id="console-first"),
    pytest.param([3, 1, "f", []], "the first frame was not a handshake", id="hostcall-first"),
    pytest.param("hello", "a frame is not an array starting with a kind", id="str"),
]


@pytest.mark.parametrize(("item", "detail"), REFUSED_HANDSHAKES)
def test_a_refused_handshake_is_a_protocol_error(item: Any, detail: str) -> None:
    conn = connection()
    conn.feed(wire(item))
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    assert info.value.malformed is False
    assert info.value.detail == detail
    assert conn.hello is None


@pytest.mark.parametrize("header", [b"\xff\xff\xff\xff", struct.pack(">I", 1025), b"GET "])
def test_a_length_over_max_message_bytes_is_refused_from_the_header_alone(header: bytes) -> None:
    conn = connection(max_message_bytes=1024)
    conn.feed(header[:3])
    assert conn.next_event() is None
    conn.feed(header[3:])
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    (length,) = struct.unpack(">I", header)
    assert info.value.malformed is True
    assert info.value.crash_message() == (
        f"worker sent a malformed frame (length {length} exceeds max_message_bytes=1024)"
    )


def test_a_frame_of_exactly_max_message_bytes_is_accepted() -> None:
    conn = shaken(max_message_bytes=1024)
    base = len(pack([4, "log", ""]))
    text = "x" * (1024 - base - 2)  # a str8 header is two bytes
    data = wire([4, "log", text])
    assert len(data) == 4 + 1024
    conn.feed(data)
    assert conn.next_event() == Console("log", text)
    conn.feed(wire([4, "log", text + "x"]))
    with pytest.raises(ProtocolError, match="length 1025 exceeds max_message_bytes=1024"):
        conn.next_event()


def test_a_host_call_id_is_refused_while_in_flight_and_free_again_after_the_reply() -> None:
    conn = shaken()
    conn.bind("f")
    conn.feed(wire([3, 7, "f", []]))
    assert conn.next_event() == HostCall(7, "f", [])
    conn.feed(wire([3, 7, "f", [1]]))
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    assert (info.value.malformed, info.value.detail) == (False, "host call id 7 reused while in flight")

    conn = shaken()
    conn.bind("f")
    conn.feed(wire([3, 7, "f", []]))
    assert conn.next_event() == HostCall(7, "f", [])
    conn.reply(7, None)
    conn.feed(wire([3, 7, "f", []]))
    assert conn.next_event() == HostCall(7, "f", [])


def test_a_request_cannot_be_answered_twice() -> None:
    conn = shaken()
    rid, _ = conn.eval("1")
    conn.feed(wire([1, rid, "first"]) + wire([1, rid, "second"]))
    assert conn.next_event() == Completed(rid)
    with pytest.raises(ProtocolError, match=f"an answer to request {rid}, which is not pending"):
        conn.next_event()
    assert conn.take(rid) == "first"


# -- a result in parts ---------------------------------------------------------------------
def test_parts_and_the_result_after_them_join_into_one_array_in_order() -> None:
    conn = shaken()
    rid, _ = conn.eval("1")
    conn.feed(wire([6, rid, [1, 2]]) + wire([4, "log", "between"]) + wire([6, rid, [_json([3, {"x": 4}])]]))
    conn.feed(wire([1, rid, [5]]))
    assert events(conn) == [Console("log", "between"), Completed(rid)]
    assert conn.take(rid) == [1, 2, [3, {"x": 4}], 5]


def test_a_part_is_no_event_until_the_result_completes_the_request() -> None:
    conn = shaken()
    rid, _ = conn.eval("1")
    conn.feed(wire([6, rid, [1]]))
    assert conn.next_event() is None
    assert rid in conn.pending


def test_parts_of_two_requests_stay_apart() -> None:
    conn = shaken()
    first, _ = conn.eval("1")
    second, _ = conn.eval("2")
    conn.feed(wire([6, first, ["a"]]) + wire([6, second, ["b"]]) + wire([1, second, ["c"]]) + wire([1, first, []]))
    assert events(conn) == [Completed(second), Completed(first)]
    assert (conn.take(first), conn.take(second)) == (["a"], ["b", "c"])


def test_an_error_after_parts_drops_them_and_the_request_id_answers_alone_later() -> None:
    conn = shaken()
    rid, _ = conn.eval("1")
    conn.feed(wire([6, rid, [1, 2]]) + wire([2, rid, "RangeError", "too large", "", []]))
    assert events(conn) == [Completed(rid)]
    with pytest.raises(JavaScriptError, match="too large"):
        conn.take(rid)
    assert not conn._parts


def test_parts_share_max_message_bytes_with_the_result_that_ends_them() -> None:
    part = wire([6, 1, [b"x" * 400]])
    size = len(part) - 4
    # Two parts and an empty result fit in exactly their sum; one byte less refuses the result.
    ok = shaken(max_message_bytes=2 * size + len(pack([1, 1, []])))
    ok.eval("1")
    ok.feed(part + part + wire([1, 1, []]))
    assert events(ok) == [Completed(1)]
    limit = 2 * size + len(pack([1, 1, []])) - 1
    tight = shaken(max_message_bytes=limit)
    tight.eval("1")
    tight.feed(part + part + wire([1, 1, []]))
    with pytest.raises(ProtocolError) as info:
        events(tight)
    assert info.value.malformed
    assert info.value.detail == f"a result in parts exceeds max_message_bytes={limit}"


PART_REFUSALS = [
    pytest.param([wire([6, 99, [1]])], "part of an answer to request 99, which is not pending", id="unknown-id"),
    pytest.param(
        [wire([6, 1, [1]]), wire([1, 1, "x"])],
        "the last part of the answer to request 1 is not an array",
        id="last-scalar",
    ),
    pytest.param([wire([6, 1, {"a": 1}])], "unexpected frame of kind 6 with 3 items", id="part-a-map"),
    pytest.param([wire([6, 1])], "unexpected frame of kind 6 with 2 items", id="part-short"),
]


@pytest.mark.parametrize(("frames", "detail"), PART_REFUSALS)
def test_a_malformed_part_is_a_protocol_error(frames: list[bytes], detail: str) -> None:
    conn = shaken()
    conn.eval("1")
    conn.feed(b"".join(frames))
    with pytest.raises(ProtocolError) as info:
        events(conn)
    assert (info.value.malformed, info.value.detail) == (False, detail)


def test_a_value_that_exhausts_the_recursion_limit_is_a_protocol_error_not_recursion_error() -> None:
    # A JSON-lane payload is decoded by json.loads, which recurses per level; with little
    # stack left, Python's recursion limit is reached inside the decoder.
    conn = shaken()
    conn.eval("1")
    conn.feed(wire([1, 1, msgpack.ExtType(5, b"[" * 100 + b"]" * 100)]))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 30)
    try:
        with pytest.raises(ProtocolError) as info:
            conn.next_event()
    finally:
        sys.setrecursionlimit(limit)
    assert info.value.malformed is True
    assert info.value.detail in ("ValueError: JSON payload nested too deeply",) or info.value.detail.startswith(
        "RecursionError: "
    )


def test_a_set_nested_inside_a_set_is_refused_before_it_is_decoded() -> None:
    conn = shaken()
    conn.eval("1")
    conn.feed(wire([1, 1, msgpack.ExtType(4, pack([msgpack.ExtType(4, pack([]))]))]))
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    assert (info.value.malformed, info.value.detail) == (True, "ValueError: a Set nested inside a Set")


# -- the JSON lane from the worker ----------------------------------------------------------------
# An EXT_JSON payload is decoded by msgspec and its depth read from the raw bytes (json_depth),
# not walked after decoding; whatever msgspec refuses goes to json.loads. None of that may
# change what the host accepts, refuses or returns.
def _json(value: Any) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_JSON, json.dumps(value).encode())


def _outcome(data: bytes) -> tuple[str, str]:
    """What a connection that sent one eval makes of data: the repr of the value, or the refusal."""
    conn = shaken()
    conn.eval("1")
    conn.feed(data)
    try:
        conn.next_event()
    except ProtocolError as exc:
        return "refused", f"{exc.malformed} {exc.detail}"
    return "value", repr(conn.take(1))


def _nested_dicts(depth: int, leaf: Any = None) -> Any:
    value: Any = {"k": leaf}
    for _ in range(depth - 1):
        value = {"k": value, "s": "[{"}
    return value


@pytest.mark.parametrize("depth", [1, 2, 64, 128, 129, 130, 131, 300, 600])
@pytest.mark.parametrize("make", [_nested, _nested_dicts], ids=["arrays", "objects"])
def test_a_json_payload_is_accepted_or_refused_at_the_depth_the_msgpack_lane_is(
    make: Callable[[int], Any], depth: int
) -> None:
    value = make(depth)
    as_msgpack = _outcome(wire([1, 1, value]))
    assert _outcome(wire([1, 1, _json(value)])) == as_msgpack
    # The whole frame as one JSON payload: the frame's own array counts as a level too.
    assert _outcome(frame(pack(_json([1, 1, value])))) == as_msgpack
    assert as_msgpack[0] == ("value" if depth <= 129 else "refused")


@pytest.mark.parametrize(("outer", "inner"), [(1, 128), (1, 129), (64, 65), (64, 66), (127, 2), (128, 2), (128, 1)])
def test_a_json_payload_inside_nested_msgpack_counts_the_levels_above_it(outer: int, inner: int) -> None:
    value: Any = _json(_nested(inner))
    for _ in range(outer):
        value = [value]
    assert _outcome(wire([1, 1, value])) == _outcome(wire([1, 1, _nested(outer + inner)]))


def test_a_json_value_dropped_by_a_repeated_key_lends_its_depth_to_nothing() -> None:
    # The first "a" is decoded from JSON and measured, then replaced: the list freed is the one
    # Python hands out next, to the outermost of the deep lists after it.
    items = [pack("a"), pack(_json([])), pack("a"), pack(1), pack("b"), pack(_nested(200))]
    data = _result_raw(b"\x83" + b"".join(items))
    assert _outcome(data) == ("refused", "True a value is nested deeper than 128 levels")


def test_brackets_quotes_and_escapes_inside_strings_do_not_count_as_nesting() -> None:
    tricky = ['"[', "\\", '\\"]]', "[[[[" * 100, "}}}", "{", "\u2028é😀", "\\u005b"]
    for depth in (128, 129, 130):
        value = _nested(depth)
        leaf = value
        while leaf:
            leaf = leaf[0]
        leaf.extend(tricky)
        value = [tricky, {"[": "]", '"{': tricky}, value]
        for text in (
            json.dumps(value),
            json.dumps(value, ensure_ascii=False, indent=1),
            json.dumps(value, separators=(",", ":")),
        ):
            payload = msgpack.ExtType(EXT_JSON, text.encode())
            assert _outcome(wire([1, 1, payload])) == _outcome(wire([1, 1, value])), (depth, text[:40])


JSON_ONLY_JSON_LOADS_TAKES = [
    # (payload, repr of the value, the same as before msgspec decoded the lane)
    pytest.param(b"[NaN, Infinity, -Infinity]", "[nan, inf, -inf]", id="non-finite"),
    pytest.param(b"[1e400, -1e400]", "[inf, -inf]", id="overflow"),
    pytest.param(b'["\\ud800x", "\\udc00", {"\\udbff": 1}]', "['\ufffdx', '\ufffd', {'\ufffd': 1}]", id="lone"),
    pytest.param(b'["\\ud83d\\ude00"]', "['😀']", id="surrogate-pair"),
    pytest.param(b"\xef\xbb\xbf[1]", "[1]", id="bom"),
    pytest.param("[1]".encode("utf-16"), "[1]", id="utf-16"),
    pytest.param(b"[" + b"1" * 4300 + b"]", "[" + "1" * 4300 + "]", id="4300-digits"),
]


@pytest.mark.parametrize(("payload", "expected"), JSON_ONLY_JSON_LOADS_TAKES)
def test_a_json_payload_msgspec_refuses_is_decoded_by_json_loads_as_before(payload: bytes, expected: str) -> None:
    assert _outcome(wire([1, 1, msgpack.ExtType(EXT_JSON, payload)])) == ("value", expected)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        pytest.param(b"[123456789012345678901234567890, -9223372036854775809]", None, id="big-ints"),
        pytest.param(b"[-0, -0.0, 0.0, 1E2, 5e-324, 2.2250738585072011e-308, 0.1]", None, id="numbers"),
        pytest.param(b' { "a" : 1 , "b" : [ ] , "a" : 2 } ', None, id="repeated-key"),
        pytest.param(b'"\\u0000\\"\\\\\\/\\b\\f\\n\\r\\t"', None, id="escapes"),
        pytest.param(b"[1] x", "refused", id="trailing"),
        pytest.param(b"[1,]", "refused", id="trailing-comma"),
        pytest.param(b'"\xff"', "refused", id="bad-utf8"),
        pytest.param(b"[" + b"1" * 4301 + b"]", "refused", id="4301-digits"),
    ],
)
def test_a_json_payload_decodes_exactly_as_json_loads_would(payload: bytes, expected: str | None) -> None:
    got = _outcome(wire([1, 1, msgpack.ExtType(EXT_JSON, payload)]))
    if expected is None:
        assert got == ("value", repr(json.loads(payload)))
    else:
        assert got[0] == expected


def test_a_json_payload_too_deep_for_any_frame_is_refused_for_its_depth_before_it_is_decoded() -> None:
    payload = msgpack.ExtType(EXT_JSON, b"[" * 5000 + b"]" * 5000)
    assert _outcome(wire([1, 1, payload])) == ("refused", "True a value is nested deeper than 128 levels")


def _depth(value: Any) -> int:
    """The reference: levels of lists and dicts, counted a level at a time."""
    depth, level = 0, [value]
    while level := [x for x in level if isinstance(x, (list, dict))]:
        depth += 1
        level = [c for x in level for c in (x.values() if isinstance(x, dict) else x)]
    return depth


_JSON_TEXT = st.text(alphabet=st.sampled_from(list('[]{}"\\/,: ab\n\u2028é😀\x00\x1f')), max_size=8)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _JSON_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_TEXT, inner, max_size=4),
    max_leaves=40,
)


@given(
    value=_JSON_VALUES,
    indent=st.none() | st.integers(0, 2),
    ensure_ascii=st.booleans(),
    wrap=st.integers(0, 40),
)
def test_json_depth_is_the_nesting_of_the_decoded_value(
    value: Any, indent: int | None, ensure_ascii: bool, wrap: int
) -> None:
    for _ in range(wrap):
        value = [value, "]"] if wrap % 2 else {"k": value}
    text = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii).encode()
    assert json_depth(text) == _depth(value)


@pytest.mark.parametrize(
    "value",
    [
        _nested(600),
        [_nested(300), [[[]]], "[[[[[["],
        [[_nested(50)] * 30, _nested(200)],
        [_nested(129)] * 100,
        [[{"a": [1, {}]}] * 50, 3],
    ],
    ids=["chain", "chain-and-twigs", "broad-then-deep", "combs", "broad"],
)
def test_json_depth_of_deep_narrow_and_broad_values(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, indent=2)):
        assert json_depth(text.encode()) == _depth(value)


# -- text from the worker -------------------------------------------------------------------------
def test_clean_text_strips_control_characters_but_keeps_newline_and_tab() -> None:
    every = "".join(map(chr, range(0xA0)))
    assert clean_text(every) == "\t\n" + "".join(map(chr, range(0x20, 0x7F)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b[31mred\x1b[0m", "[31mred[0m"),
        ("line\rover", "lineover"),
        ("a\x00b\x07c\x08d", "abcd"),
        ("\x9b2J\x85", "2J"),
        ("keep\ttabs\nand newlines", "keep\ttabs\nand newlines"),
        ("é € 😀 中文 \u00a0", "é € 😀 中文 \u00a0"),
        ("", ""),
    ],
)
def test_clean_text_examples(text: str, expected: str) -> None:
    assert clean_text(text) == expected


def test_console_text_and_guest_errors_arrive_cleaned() -> None:
    conn = shaken()
    rid, _ = conn.eval("1")
    conn.feed(wire([4, "error", "\x1b]0;title\x07ok\n"]) + wire([2, rid, "Type\x1bError", "m\rn", "s\x00t\n", []]))
    assert conn.next_event() == Console("error", "]0;titleok\n")
    assert conn.next_event() == Completed(rid)
    with pytest.raises(JavaScriptError) as info:
        conn.take(rid)
    assert (info.value.name, info.value.message, info.value.stack) == ("TypeError", "mn", "st\n")


def test_the_handshake_versions_and_breaches_are_cleaned_and_capped() -> None:
    conn = connection()
    conn.feed(wire([0, PROTOCOL_VERSION, "\x1b[1m" + "9" * 100, "13.0\r\n", ["read /etc/passwd\x1b[0m", "x" * 300]]))
    hello = conn.next_event()
    assert hello == Hello(PROTOCOL_VERSION, "[1m" + "9" * 61, "13.0\n", ("read /etc/passwd[0m", "x" * 200))
    assert conn.hello == hello


def test_crash_messages_start_with_the_hosts_own_prefix() -> None:
    assert ProtocolError("x", malformed=True).crash_message() == "worker sent a malformed frame (x)"
    assert ProtocolError("x", malformed=False).crash_message() == "worker broke protocol: x"
