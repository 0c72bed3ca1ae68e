"""The decode budget (pydeno/host/wire/budget.py), driven without I/O like tests/unit/test_wire.py.

Properties, each over random frames: whatever bytes arrive, the connection gives events or a
ProtocolError and nothing else; decoding a frame never builds more than it was charged, and
the charge never exceeds what a frame is charged unread; a frame within its allowance decodes
exactly; one over it is refused having built nothing.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import struct
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pydeno import undefined
from pydeno.host.wire.budget import frame_cost, json_cost, json_shape
from pydeno.host.wire.codec import Codec
from pydeno.host.wire.connection import Connection, Hello, ProtocolError, frame
from pydeno.host.wire.protocol import DECODE_FLOOR, EXT_JSON, EXT_SET, MAX_COST_PER_BYTE, PROTOCOL_VERSION

MiB = 2**20
HELLO = [0, PROTOCOL_VERSION, "2.0.0", "13.0", []]
BOUNDED = settings(max_examples=300, deadline=None)
# What unpack_counted itself keeps while it decodes (its budget, its dicts, the decoder's own
# state): the same for every frame, however large.
OVERHEAD = 16 * 1024


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def codec(ratio: int = 40) -> Codec:
    return Codec(lambda function_id: ("function", function_id), lambda value: None, MiB, max_decode_ratio=ratio)


def shaken(ratio: int = 40) -> Connection:
    conn = Connection(codec(ratio), MiB)
    conn.feed(frame(pack(HELLO)))
    assert isinstance(conn.next_event(), Hello)
    return conn


@contextmanager
def traced() -> Iterator[list[int]]:
    """The peak of Python allocations made inside the block, above what was allocated before.
    The cyclic collector is off inside it (it could only lower the peak); no collection
    before it, which late in a long test run costs more than the decoding measured."""
    enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    found: list[int] = []
    try:
        yield found
    finally:
        found.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
        if enabled:
            gc.enable()


# -- values, of every kind the wire carries ------------------------------------------------------
# ASCII, Latin-1, the BMP and beyond it: the widths a Python str can take.
_CHARS = st.sampled_from(list("ab09 ~\x00éÿ€中\u2028😀\U0010fffd"))
_TEXT = st.text(alphabet=_CHARS, max_size=6)
_KEYS = _TEXT | st.integers(-40, 300) | st.none() | st.booleans()
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-40, 300)
    | st.floats(allow_nan=False)
    | _TEXT
    | st.binary(max_size=4)
    | st.just(undefined)
    | st.datetimes(timezones=st.just(dt.UTC))
)
_JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False) | _TEXT
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


def _as_json(value: Any) -> msgpack.ExtType:
    return msgpack.ExtType(EXT_JSON, json.dumps(value, ensure_ascii=False).encode())


VALUES = st.recursive(
    _SCALARS | _JSON.map(_as_json),
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(_KEYS, inner, max_size=6)
        | st.sets(st.integers(-40, 300) | _TEXT, max_size=6)
    ),
    max_leaves=40,
)
# Many small containers, where decoding costs most per byte.
EMPTIES = st.lists(st.sampled_from([[], {}, [[]], [{}], {0: None}, {"k": []}, -10, "ab"]), max_size=300)


def result_frame(value: Any) -> bytes:
    """A RESULT frame for request 1, packed as the host packs (its extension types too)."""
    return codec().pack_frame([1, 1], value)


def expected(value: Any) -> Any:
    """What the host decodes a packed value into (JSON-lane payloads as their value)."""
    if isinstance(value, msgpack.ExtType):
        return json.loads(value.data)
    if isinstance(value, list):
        return [expected(item) for item in value]
    if isinstance(value, dict):
        return {key: expected(item) for key, item in value.items()}
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


def charged_exactly(decoder: Codec, data: bytes) -> tuple[Any, int]:
    """Decode data with an allowance just too small for it to go unread, so it is charged its
    exact cost."""
    return decoder.unpack_counted(data, len(data) * (MAX_COST_PER_BYTE + 9) + 63)


# -- properties ----------------------------------------------------------------------------------
@pytest.mark.slow
@BOUNDED
@given(value=VALUES | EMPTIES)
def test_decoding_a_frame_never_builds_more_than_it_is_charged(value: Any) -> None:
    data = result_frame(value)
    decoder = codec()
    with traced() as peak:
        decoded, cost = charged_exactly(decoder, data)
    assert peak[0] <= cost + OVERHEAD, (peak[0], cost, len(data))
    del decoded


@pytest.mark.slow
@BOUNDED
@given(value=VALUES | EMPTIES)
def test_a_frame_is_never_charged_more_than_its_most_unread(value: Any) -> None:
    data = result_frame(value)
    assert frame_cost(data, MiB, []) <= MAX_COST_PER_BYTE * len(data)


@BOUNDED
@given(data=st.binary(max_size=200))
def test_any_bytes_are_charged_without_an_error(data: bytes) -> None:
    # A container's claimed count is charged even past the end of the bytes: the decoder
    # allocates its slots before it finds the items missing.
    assert frame_cost(data, MiB, []) >= 0


@pytest.mark.slow
@BOUNDED
@given(value=VALUES)
def test_a_frame_within_its_allowance_decodes_exactly(value: Any) -> None:
    conn = shaken()
    conn.eval("1")
    conn.feed(frame(result_frame(value)))
    assert conn.next_event() is not None
    assert conn.take(1) == expected(value)


@pytest.mark.slow
@BOUNDED
@given(value=_JSON)
def test_a_json_payload_is_charged_from_its_brackets_as_the_worker_counts_them(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False).encode()
    lists, dicts, _ = json_shape(text)
    assert (lists, dicts) == _containers(value)
    found: list[tuple[int, int]] = []
    ext = 48 + len(text) if len(text) > 1 else 0
    assert frame_cost(pack(msgpack.ExtType(EXT_JSON, text)), MiB, found) == ext + json_cost(lists, dicts, len(text))


def _containers(value: Any) -> tuple[int, int]:
    if isinstance(value, list):
        counts = [_containers(item) for item in value]
        return 1 + sum(c[0] for c in counts), sum(c[1] for c in counts)
    if isinstance(value, dict):
        counts = [_containers(item) for item in value.values()]
        return sum(c[0] for c in counts), 1 + sum(c[1] for c in counts)
    return 0, 0


def _frames() -> st.SearchStrategy[bytes]:
    """Streams of frames, valid and not: whole ones, cut short, joined, bytes flipped."""
    whole = st.builds(lambda v: frame(result_frame(v)), VALUES | EMPTIES)
    raw = st.binary(max_size=64).map(frame)
    piece = whole | raw | st.binary(max_size=32)
    return st.lists(piece, min_size=1, max_size=4).flatmap(
        lambda pieces: st.tuples(st.just(b"".join(pieces)), st.integers(0, 255), st.integers(0, 10_000)).map(
            lambda t: _mutate(*t)
        )
    )


def _mutate(data: bytes, flip: int, where: int) -> bytes:
    if not data:
        return data
    cut = data[: where % (len(data) + 1)] if where % 3 == 0 else data
    if where % 3 == 1:
        i = where % len(data)
        cut = data[:i] + bytes([data[i] ^ flip]) + data[i + 1 :]
    return cut


@pytest.mark.slow
@BOUNDED
@given(stream=_frames(), ratio=st.sampled_from([1, 8, 40]))
def test_whatever_bytes_arrive_the_connection_gives_events_or_a_protocol_error(stream: bytes, ratio: int) -> None:
    conn = shaken(ratio)
    conn.eval("1")
    conn.bind("f")
    conn.feed(stream)
    try:
        while conn.next_event() is not None:
            pass
    except ProtocolError:
        pass


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    item=st.sampled_from([b"\x80", b"\x90", b"\x91\xc0", b"\x81\x00\xc0", b"\xf6", b"\xd5\x04\x91\x00"]),
    n=st.integers(40_000, 120_000),
)
def test_a_frame_over_its_allowance_is_refused_having_built_nothing(item: bytes, n: int) -> None:
    data = frame(b"\x93\x01\x01\xdd" + struct.pack(">I", n) + item * n)
    conn = shaken(ratio=1)
    conn.eval("1")
    conn.feed(data)
    with traced() as peak, pytest.raises(ProtocolError, match="would take about") as info:
        conn.next_event()
    assert not info.value.malformed
    assert peak[0] <= OVERHEAD


def test_the_allowance_is_the_ratio_times_the_bytes_plus_the_floor() -> None:
    # A frame of n empty maps costs 80 + 8n + 72n and the frame's own array and numbers.
    n = 40_000
    data = b"\x93\x01\x01\xdd" + struct.pack(">I", n) + b"\x80" * n
    cost = frame_cost(data, MiB, [])
    assert cost == 80 + 3 * 8 + 80 + 8 * n + 72 * n
    ratio = (cost - DECODE_FLOOR) // len(data)
    assert codec(ratio + 1).unpack_counted(data, codec(ratio + 1).allowance(len(data)))[0][2] == [{}] * n
    refused = codec(ratio)
    with pytest.raises(ValueError, match=rf"max_decode_ratio={ratio} per byte"):
        refused.unpack_counted(data, refused.allowance(len(data)))


def test_parts_of_a_result_share_one_allowance() -> None:
    # Each part alone is within the allowance of its own bytes; the third is not within what
    # the three together may take.
    n = 7000
    part = frame(b"\x93\x06\x01\xdd" + struct.pack(">I", n) + b"\x80" * n)
    single = Connection(codec(), MiB)
    single.feed(frame(pack(HELLO)))
    single.next_event()
    single.eval("1")
    single.feed(part + frame(pack([1, 1, []])))
    assert single.next_event() is not None
    assert single.take(1) == [{}] * n
    conn = shaken()
    conn.eval("1")
    conn.feed(part * 3)
    with pytest.raises(ProtocolError, match=r"^a result in parts "):
        conn.next_event()


def test_a_set_inside_a_set_is_refused_without_charging_what_it_holds() -> None:
    inner = pack(msgpack.ExtType(EXT_SET, pack([1])))
    for _ in range(2000):
        inner = pack([msgpack.ExtType(EXT_SET, inner)])
    conn = shaken()
    conn.eval("1")
    conn.feed(frame(b"\x93\x01\x01" + inner))
    with pytest.raises(ProtocolError, match="a Set nested inside a Set"):
        conn.next_event()
