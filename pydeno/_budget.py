"""The decode budget: how much host memory the objects decoded from one frame may take.

A byte on the wire can become far more than a byte of Python objects: msgpack's 0x80 (an
empty map) becomes a 64-byte dict and the 8-byte slot that holds it, and a value that reuses
one empty container at every position travels as a tree of them. So before a frame from
the worker is decoded, its tokens are read here and charged what decoding them builds; a
frame whose charge is over its allowance is refused without building anything.

The allowance of a frame of ``n`` bytes is ``ratio * n + DECODE_FLOOR`` (``ratio`` is the
runtime's ``max_decode_ratio``); the parts of one result share one allowance, over the
bytes of all of them. DECODE_FLOOR, MAX_COST_PER_BYTE and the default ratio are in the wire
contract (pydeno/host/_protocol.py): the worker charges with them too. The charge is an upper
bound on what CPython builds, per token:

==============================  ===========================================================
token                           bytes charged
==============================  ===========================================================
array of n items                72 if empty, else 80 + 8n (the list and its item slots)
map of n entries                72 if empty, 232 up to 5 entries, else 168 + 64n
                                (either has 8 more for its slot in the depth check's walk)
string of n bytes               0 up to 1 byte (cached), 112 for 2, else 128 + 4n (a
                                string of wide characters, and the entry a map key takes
                                in CPython's table of interned strings)
binary of n bytes               0 up to 1 byte, else 48 + n
integer                         0 when CPython caches it (-5 to 256), 32 or 48 otherwise
float                           32
nil, booleans                   0
extension of n payload bytes    48 + n for the payload (0 up to 1 byte), and: BigInt
                                96 + 2n, Date 128, a function handle 256, a Set of k items
                                216 + 112k (its items are charged as an array), JSON below
==============================  ===========================================================

A part of a result in parts is charged besides ``join_cost``: the list the parts join into
grows by its items.

A JSON payload of n bytes holding L arrays and D objects (brackets outside strings) is
charged ``96 L + 200 D + 15 max(0, n - 3 (L + D))``: a list or a small dict with the slot
that holds it, and 15 bytes for every other byte, which covers the costliest scalars (a
short string of wide characters and the slot for it). The worker counts L and D while it
checks that a value is JSON-exact, and charges the same (worker/codec.ts).

Every charge is at most MAX_COST_PER_BYTE per byte of the frame, so a frame that small
against its allowance (with room for the most a part can add joining, nine bytes a byte) is
not read at all, and is charged that most: the warm path pays nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import accumulate
from typing import Final

from .host._protocol import EXT_BIGINT, EXT_DATE, EXT_FUNCTION, EXT_JSON, EXT_SET

__all__ = [
    "DecodeRefused",
    "frame_cost",
    "join_cost",
    "json_cost",
    "json_shape",
    "json_text",
]

# BigInt (and its digits, sliced), Date, function handle (and its entry among live ones).
_EXT_CHARGE: Final = {EXT_BIGINT: 96, EXT_DATE: 128, EXT_FUNCTION: 256}


class DecodeRefused(ValueError):
    """A frame's decoded objects would take more host memory than its allowance."""


def list_cost(n: int) -> int:
    return 80 + 8 * n if n else 72


def map_cost(n: int) -> int:
    if n == 0:
        return 72
    return 232 if n <= 5 else 168 + 64 * n


def join_cost(items: int) -> int:
    """The growth of the list a result's parts join into, for one part of ``items`` items."""
    return 64 + 9 * items


def str_cost(n: int) -> int:
    if n <= 1:
        return 0
    return 112 if n == 2 else 128 + 4 * n


def bin_cost(n: int) -> int:
    return 0 if n <= 1 else 48 + n


def json_cost(lists: int, dicts: int, n: int) -> int:
    return 96 * lists + 200 * dicts + 15 * max(0, n - 3 * (lists + dicts))


# -- JSON: brackets outside strings -------------------------------------------------------
# Escapes go first, each a backslash and the character after it (the hex digits of \uXXXX
# are harmless), then every byte but quotes and brackets, then strings, by then only their
# quotes and any brackets written inside them.
_JSON_ESCAPE: Final = re.compile(rb"\\.", re.DOTALL)
_JSON_STRING: Final = re.compile(rb'"[^"]*"')
_JSON_NOT_MARK: Final = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_JSON_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_JSON_STEP: Final = bytes.maketrans(b"[]", b"\x01\xff")


def json_shape(text: bytes) -> tuple[int, int, int]:
    """(arrays, objects, nesting depth) of valid UTF-8 JSON text, read from its bytes in C.

    It relies on the text being valid JSON: only then are quotes string delimiters and
    backslashes escapes inside strings. On anything else the counts mean nothing, which is
    harmless here: such text fails to decode whatever they say.
    """
    if b"\\" in text:
        text = _JSON_ESCAPE.sub(b"", text)
    marks = text.translate(None, _JSON_NOT_MARK)
    # Quotes alternate opening and closing, and dropping two adjacent ones keeps that so: the
    # pair is an empty string, or the end of one string and the start of the next with no
    # brackets between. What is left between quotes is then brackets inside strings.
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = _JSON_STRING.sub(b"", marks)
    dicts = marks.count(b"{")
    lists = marks.count(b"[")
    if not dicts + lists:
        return 0, 0, 0
    if dicts:
        marks = marks.translate(_JSON_SQUARE)
    # Each pass drops the innermost containers, so passes count the depth. They are cheap
    # while the text halves; for what is left of a deep, narrow value, a running sum.
    depth = 0
    while marks:
        shorter = marks.replace(b"[]", b"")
        depth += 1
        if len(shorter) * 2 > len(marks):
            return lists, dicts, depth + max(accumulate(memoryview(shorter.translate(_JSON_STEP)).cast("b")))
        marks = shorter
    return lists, dicts, depth


def json_text(payload: bytes) -> bytes | None:
    """payload as UTF-8, the bytes json_shape reads: json.loads also takes UTF-16 and UTF-32,
    whose quotes and brackets are not single bytes. None if it cannot be decoded at all."""
    encoding = json.detect_encoding(payload)
    if encoding == "utf-8":
        return payload
    try:
        return payload.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError:
        return None


# -- msgpack: one pass over the tokens ----------------------------------------------------
# Kinds of token by first byte. _FIXED tokens have a length and a charge known from that
# byte alone; the others read a length or a count from the bytes after it.
_FIXED, _STR, _BIN, _ARRAY, _MAP, _EXT, _FIXEXT, _BAD = range(8)
_KIND = [_BAD] * 256
_LEN = [1] * 256
_CHARGE = [0] * 256
# For the other kinds: how many bytes hold the length or count after the first byte.
_WIDTH = [0] * 256


def _fixed(first: int, last: int, length: int, charge: int) -> None:
    for b in range(first, last + 1):
        _KIND[b], _LEN[b], _CHARGE[b] = _FIXED, length, charge


_fixed(0x00, 0x7F, 1, 0)
_fixed(0xE0, 0xFA, 1, 32)  # -32 to -6: CPython caches only -5 to 256
_fixed(0xFB, 0xFF, 1, 0)
_fixed(0xC0, 0xC0, 1, 0)
_fixed(0xC2, 0xC3, 1, 0)
for _b, _length, _charge in (
    (0xCA, 5, 32),
    (0xCB, 9, 32),
    (0xCC, 2, 0),
    (0xCD, 3, 32),
    (0xCE, 5, 32),
    (0xCF, 9, 48),
    (0xD0, 2, 32),
    (0xD1, 3, 32),
    (0xD2, 5, 32),
    (0xD3, 9, 48),
):
    _fixed(_b, _b, _length, _charge)
for _n in range(16):
    _fixed(0x80 | _n, 0x80 | _n, 1, map_cost(_n))
    _fixed(0x90 | _n, 0x90 | _n, 1, list_cost(_n))
for _n in range(32):
    _fixed(0xA0 | _n, 0xA0 | _n, 1 + _n, str_cost(_n))
for _first, _kind, _width in (
    (0xD9, _STR, 1),
    (0xDA, _STR, 2),
    (0xDB, _STR, 4),
    (0xC4, _BIN, 1),
    (0xC5, _BIN, 2),
    (0xC6, _BIN, 4),
    (0xDC, _ARRAY, 2),
    (0xDD, _ARRAY, 4),
    (0xDE, _MAP, 2),
    (0xDF, _MAP, 4),
    (0xC7, _EXT, 1),
    (0xC8, _EXT, 2),
    (0xC9, _EXT, 4),
):
    _KIND[_first], _WIDTH[_first] = _kind, _width
for _first, _size in ((0xD4, 1), (0xD5, 2), (0xD6, 4), (0xD7, 8), (0xD8, 16)):
    _KIND[_first], _LEN[_first] = _FIXEXT, _size


def frame_cost(data: Sequence[int], limit: int, shapes: list[tuple[int, int]]) -> int:
    """What decoding the msgpack in data builds, charged as the module docstring says.

    ``limit`` is the decoder's max_str_len (and array, bin and ext lengths; maps get half).
    One pass over the tokens, flat: a container is charged for its count, and its items are
    the tokens after it. A Set's payload is read as tokens of its own, inside its bounds.
    Each JSON payload's (length, depth) is appended to ``shapes`` in order, for the decoder.

    The pass ends at the first token the decoder refuses (a byte msgpack reserves, a length
    over its limits, a token cut short by the end of the frame or of a Set's payload, a Set
    inside a Set): decoding fails there too, having built only what came before, which is
    charged already.
    """
    kind, length, charge, width = _KIND, _LEN, _CHARGE, _WIDTH
    pos, end = 0, len(data)
    # The ends of the regions being read: the frame's, and those of Sets' payloads inside.
    ends: list[int] = []
    cost = 0
    last = -1
    while True:
        if pos >= end:
            if pos > end or not ends:
                return cost
            end = ends.pop()
            continue
        b = data[pos]
        k = kind[b]
        if k == _FIXED:
            step = length[b]
            if b == last and pos + 2 * step < end and data[pos + step] == b == data[pos + 2 * step]:
                # The second of four like tokens in a row: the rest of their run is counted in C.
                run = _run(data, pos, end, step, b)
                pos += run * step
                cost += run * charge[b]
            else:
                pos += step
                cost += charge[b]
                last = b
            continue
        if k == _BAD:
            return cost
        if k == _FIXEXT:
            n = length[b]
            step = 2 + n
            if pos + step + 1 < end and data[pos + step] == b and data[pos + step + 1] == data[pos + 1]:
                code = data[pos + 1]
                if code not in (EXT_SET, EXT_JSON):
                    # A run of like extension values (Dates, undefined): counted in C, all but
                    # the last, which the code below reads as any other.
                    run = _run(data, pos, end, step, b, code) - 1
                    pos += run * step
                    cost += run * (
                        (48 + n if n > 1 else 0) + _EXT_CHARGE.get(code, 0) + (2 * n if code == EXT_BIGINT else 0)
                    )
            head = pos + 2
        else:
            w = width[b]
            head = pos + 1 + w
            if head > end:
                return cost
            n = int.from_bytes(data[pos + 1 : head], "big")
            if k == _EXT:
                head += 1
        if n > (limit // 2 if k == _MAP else limit):
            return cost
        if k == _STR:
            pos = head + n
            cost += str_cost(n)
        elif k == _BIN:
            pos = head + n
            cost += bin_cost(n)
        elif k == _ARRAY:
            pos = head
            cost += list_cost(n)
        elif k == _MAP:
            pos = head
            cost += map_cost(n)
        else:
            stop = head + n
            if stop > end:
                return cost
            code = data[head - 1]
            cost += 48 + n if n > 1 else 0
            if code == EXT_SET:
                if ends:
                    # A Set inside a Set: its payload is copied for the hook that refuses it.
                    return cost
                cost += 216 + 112 * _count(data, head, stop)
                ends.append(end)
                pos, end = head, stop
                continue
            if code == EXT_JSON:
                text = json_text(bytes(data[head:stop]))
                if text is None:
                    return cost
                lists, dicts, depth = json_shape(text)
                cost += json_cost(lists, dicts, max(n, len(text)))
                shapes.append((n, depth))
            else:
                cost += _EXT_CHARGE.get(code, 0) + (2 * n if code == EXT_BIGINT else 0)
            pos = stop


_ONE = [bytes([b]) for b in range(256)]


def _run(data: Sequence[int], pos: int, end: int, step: int, b: int, second: int | None = None) -> int:
    """How many tokens of ``step`` bytes starting with byte b (and ``second`` after it, for
    an extension type) follow each other from pos (at least one), counted in C: a typed array
    or a list of like items is one such run. Read in windows that double up to a few KiB, so
    that a short run costs no more than its own bytes and a long one no memory to speak of."""
    run, window = 0, 16
    while True:
        stop = min(end - (step - 1), pos + window * step)
        firsts = bytes(data[pos:stop:step])
        same = len(firsts) - len(firsts.lstrip(_ONE[b]))
        if second is not None:
            seconds = bytes(data[pos + 1 : stop + 1 : step])
            same = min(same, len(seconds) - len(seconds.lstrip(_ONE[second])))
        run += same
        if same < len(firsts) or stop < pos + window * step:
            return max(run, 1)
        pos += same * step
        window = min(2 * window, 4096)


def _count(data: Sequence[int], pos: int, end: int) -> int:
    """The count of the array header at pos (a Set's payload), 0 for anything else."""
    if pos >= end:
        return 0
    b = data[pos]
    if 0x90 <= b <= 0x9F:
        return b & 0x0F
    if b in (0xDC, 0xDD):
        head = pos + (3 if b == 0xDC else 5)
        if head <= end:
            return int.from_bytes(data[pos + 1 : head], "big")
    return 0
