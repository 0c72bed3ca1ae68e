"""The decode budget: how much host memory the objects decoded from one frame may take.

A byte on the wire can become far more than a byte of Python objects: msgpack's 0x80 (an
empty map) becomes a 64-byte dict and the 8-byte slot that holds it, and a value that reuses
one empty container at every position travels as a tree of them. So before a frame from
the worker is decoded, its tokens are read here and charged what decoding them builds; a
frame whose charge is over its allowance is refused without building anything.

The allowance of a frame of ``n`` bytes is ``ratio * n + DECODE_FLOOR`` (``ratio`` is the
runtime's ``max_decode_ratio``); the parts of one result share one allowance, over the
bytes of all of them. DECODE_FLOOR, MAX_COST_PER_BYTE and the default ratio are in the wire
contract (pydeno/host/wire/protocol.py): the worker charges with them too. The charge is an upper
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
                                96 + 2n, Date 128, a function handle 256, an Error's mark
                                1024 (the JavaScriptError made of its map), a Set of k items
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

Reading the tokens is itself work a forged frame can make the host do, so the read stops as
soon as the charge is over the allowance (a refusal needs no more), and is done in C where
the frame's shape allows: a run of like tokens (a typed array), or of long tokens of one
length, through strided slices; a run of one- and two-byte tokens in any mix (nested or
alternating empty containers, small numbers among them) through a few operations on big
integers per KiB. Everything else is read a token at a time, in bursts that need no bounds
checks, and a look for a run that finds none makes the next look wait longer, so that a
frame built to keep breaking runs costs no more than its tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import accumulate
from typing import Final

from .protocol import EXT_BIGINT, EXT_DATE, EXT_ERROR, EXT_FUNCTION, EXT_JSON, EXT_SET

__all__ = [
    "DecodeRefused",
    "frame_cost",
    "join_cost",
    "json_cost",
    "json_shape",
    "json_text",
]


# BigInt (and its digits, sliced), Date, function handle (and its entry among live ones),
# the JavaScriptError an Error's mark stands for (its map and strings are charged as such).
_EXT_CHARGE: Final = {EXT_BIGINT: 96, EXT_DATE: 128, EXT_FUNCTION: 256, EXT_ERROR: 1024}


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
# Kinds of token by first byte. _SHORT and _LONG tokens have a length and a charge known from
# that byte alone (one or two bytes long, and more); the others read a length or a count from
# the bytes after it.
_SHORT, _LONG, _STR, _BIN, _ARRAY, _MAP, _EXT, _FIXEXT, _BAD = range(9)
_KIND = [_BAD] * 256
_LEN = [1] * 256
_CHARGE = [0] * 256
# For the other kinds: how many bytes hold the length or count after the first byte.
_WIDTH = [0] * 256


def _fixed(first: int, last: int, length: int, charge: int) -> None:
    for b in range(first, last + 1):
        _KIND[b], _LEN[b], _CHARGE[b] = _SHORT if length <= 2 else _LONG, length, charge


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

# The lengths of strings and binaries with a one-byte length, charged without a call.
_STR_COST = [str_cost(n) for n in range(256)]
_BIN_COST = [bin_cost(n) for n in range(256)]
# A charge no frame reaches: the walk's stop when it is not to stop early.
_NEVER: Final = 1 << 80


def frame_cost(data: Sequence[int], limit: int, shapes: list[tuple[int, int]], stop: int | None = None) -> int:
    """What decoding the msgpack in data builds, charged as the module docstring says.

    ``limit`` is the decoder's max_str_len (and array, bin and ext lengths; maps get half).
    One pass over the tokens, flat: a container is charged for its count, and its items are
    the tokens after it. A Set's payload is read as tokens of its own, inside its bounds.
    Each JSON payload's (length, depth) is appended to ``shapes`` in order, for the decoder.

    The pass ends at the first token the decoder refuses (a byte msgpack reserves, a length
    over its limits, a token cut short by the end of the frame or of a Set's payload, a Set
    inside a Set): decoding fails there too, having built only what came before, which is
    charged already. With ``stop`` it ends as soon as the charge is over ``stop`` and returns
    the charge so far: refusing the frame needs no more.
    """
    kind, fixed, charge, width, bursts, margin = _KIND, _FIXED_LEN, _CHARGE, _WIDTH, _BURSTS, _MARGIN
    # The tables assume every one-byte length within the limits (as any real limit is).
    sized8 = _SIZED8 if limit >= 255 else _UNSIZED
    over = _NEVER if stop is None else stop
    pos, end = 0, len(data)
    # The ends of the regions being read: the frame's, and those of Sets' payloads inside.
    ends: list[int] = []
    cost = 0
    # Bursts to go before a run is looked for again: a look that finds none doubles the wait,
    # so a frame built to keep breaking runs costs the walk no more than its tokens.
    wait = skip = 0
    while True:
        if pos >= end:
            if pos > end or not ends:
                return cost
            end = ends.pop()
            continue
        # Tokens in bursts. A fixed token is at most 32 bytes long, so a burst of them needs no
        # bounds check while it stays _MARGIN from the end: near it a burst is shorter, down to
        # one token. The other kinds check their own bounds, and end the burst where a fixed
        # token after them could run past the end unchecked.
        room = end - pos
        sizes = sized8 if room >= 32 else _UNSIZED
        for _ in bursts[64 if room >= margin else room >> 5]:
            b = data[pos]
            step = fixed[b]
            if step:
                pos += step
                cost += charge[b]
                continue
            sized = sizes[b]
            if sized:
                # A string or binary with a one-byte length, or a fixed-size extension value
                # other than a Set or JSON: its length and charge follow from its second byte.
                step, more = sized[data[pos + 1]]
                if step:
                    pos += step
                    cost += more
                    if end - pos < margin:
                        break
                    continue
            k = kind[b]
            if k == _BAD:
                return cost
            if k == _FIXEXT:
                n = _LEN[b]
                step = 2 + n
                code = data[pos + 1] if pos + 1 < end else -1
                special = code in (EXT_SET, EXT_JSON)
                if not special and pos + step + 1 < end and data[pos + step] == b and data[pos + step + 1] == code:
                    # A run of like extension values (Dates, undefined): counted in C, all but
                    # the last, which is read as any other.
                    run = _run(data, pos, end, step, b, code) - 1
                    pos += run * step
                    cost += run * _FIXEXT_CHARGE[b][code]
                first = pos + 2
                tail = first + n
                if n > limit or tail > end:
                    return cost
                if not special:
                    pos = tail
                    cost += _FIXEXT_CHARGE[b][code]
                    if cost > over or end - pos < margin:
                        break
                    continue
            else:
                w = width[b]
                head = pos + 1 + w
                if head > end:
                    return cost
                if w == 1:
                    n = data[pos + 1]
                elif w == 2:
                    n = data[pos + 1] << 8 | data[pos + 2]
                else:
                    n = int.from_bytes(data[pos + 1 : head], "big")
                if n > (limit >> 1 if k == _MAP else limit):
                    return cost
                if k != _EXT:
                    if k == _STR:
                        pos = head + n
                        cost += _STR_COST[n] if n < 256 else str_cost(n)
                    elif k == _BIN:
                        pos = head + n
                        cost += _BIN_COST[n] if n < 256 else bin_cost(n)
                    elif k == _ARRAY:
                        pos = head
                        cost += 80 + 8 * n if n else 72
                    else:
                        pos = head
                        cost += map_cost(n)
                    if cost > over or end - pos < margin:
                        break
                    continue
                first = head + 1
                tail = first + n
                if tail > end:
                    return cost
                code = data[head]
            # An extension value: its payload, then what it stands for.
            cost += 48 + n if n > 1 else 0
            if code == EXT_SET:
                if ends:
                    # A Set inside a Set: its payload is copied for the hook that refuses it.
                    return cost
                # Its items are read as tokens of their own, until the end of its payload.
                cost += 216 + 112 * _count(data, first, tail)
                ends.append(end)
                pos, end = first, tail
                break
            if code == EXT_JSON:
                text = json_text(bytes(data[first:tail]))
                if text is None:
                    return cost
                lists, dicts, depth = json_shape(text)
                cost += json_cost(lists, dicts, max(n, len(text)))
                shapes.append((n, depth))
            else:
                cost += _EXT_CODE_CHARGE[code] + (2 * n if code == EXT_BIGINT else 0)
            pos = tail
            if cost > over or end - pos < margin:
                break
        else:
            if cost > over:
                return cost
            if skip or end - pos < _MARGIN:
                skip -= skip > 0
                continue
            took, more = _bulk(data, pos, end, over - cost)
            if took < _GAIN:
                wait = min(2 * wait + 1, _WAIT_MAX)
                skip = wait
            else:
                wait = 0
            pos += took
            cost += more
        if cost > over:
            return cost


_BURSTS = [range(max(1, n)) for n in range(65)]
_MARGIN = 64 * 32
# A look for a run that reads fewer bytes than this counts as finding none.
_GAIN, _WAIT_MAX = 256, 64
# The length of a fixed token by its first byte, 0 for the other kinds.
_FIXED_LEN = [_LEN[b] if _KIND[b] in (_SHORT, _LONG) else 0 for b in range(256)]
# What an extension value stands for besides its payload, by type code; and the whole charge
# of a fixed-size one by its first byte and type code (not read for Sets and JSON).
_EXT_CODE_CHARGE = [_EXT_CHARGE.get(code, 0) for code in range(256)]
_FIXEXT_CHARGE = {
    b: [bin_cost(_LEN[b]) + _EXT_CODE_CHARGE[code] + (2 * _LEN[b] if code == EXT_BIGINT else 0) for code in range(256)]
    for b in range(256)
    if _KIND[b] == _FIXEXT
}
# By first byte, for the tokens whose length and charge follow from their second byte: the
# (length, charge) of each second byte, (0, 0) where the walk reads the token itself (a Set or
# JSON payload, a string too long to fit this table's margin).
_SIZED8: list[list[tuple[int, int]] | None] = [None] * 256
_SIZED8[0xD9] = [(2 + n, str_cost(n)) if n < 254 else (0, 0) for n in range(256)]
_SIZED8[0xC4] = [(2 + n, bin_cost(n)) if n < 254 else (0, 0) for n in range(256)]
for _b, _charges in _FIXEXT_CHARGE.items():
    _SIZED8[_b] = [(0, 0) if code in (EXT_SET, EXT_JSON) else (2 + _LEN[_b], _charges[code]) for code in range(256)]
_UNSIZED: list[list[tuple[int, int]] | None] = [None] * 256


def _bulk(data: Sequence[int], pos: int, end: int, budget: int) -> tuple[int, int]:
    """The bytes from pos (a token's first byte, at least _MARGIN before end) that a run read
    in C covers, and their charge: like tokens (a typed array), long tokens of one length, or
    short tokens of any mix; (0, 0) if none begins there."""
    b = data[pos]
    step = _FIXED_LEN[b]
    if not step:
        return 0, 0
    if data[pos + step] == b == data[pos + 2 * step]:
        run = _run(data, pos, end, step, b)
        return run * step, run * _CHARGE[b]
    if step > 2:
        if _STRIDE[data[pos + step]] == step == _STRIDE[data[pos + 2 * step]]:
            run, cost = _strides(data, pos, end, step)
            return run * step, cost
        return 0, 0
    after = pos + step
    if _KIND[data[after]] != _SHORT or _KIND[data[after + _LEN[data[after]]]] != _SHORT:
        return 0, 0
    stop, cost = _shorts(data, pos, end, budget)
    return stop - pos, cost


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


# -- runs of long tokens of one length ----------------------------------------------------
# The first bytes of the long tokens of each length, and each one's charge in fours.
_STRIDE = [_LEN[b] if _KIND[b] == _LONG else 0 for b in range(256)]
_FIRSTS = {n: bytes(b for b in range(256) if _STRIDE[b] == n) for n in set(_STRIDE) - {0}}
_LONG_FOURS = bytes(_CHARGE[b] // 4 if _KIND[b] == _LONG else 0 for b in range(256))


def _strides(data: Sequence[int], pos: int, end: int, step: int) -> tuple[int, int]:
    """How many long tokens of ``step`` bytes follow each other from pos (at least one), and
    their charge: whatever their first bytes, the next one starts ``step`` bytes on, so their
    first bytes are a slice of the frame with that stride, read in C like _run's."""
    firsts_of = _FIRSTS[step]
    run, cost, window = 0, 0, 16
    while True:
        stop = min(end - (step - 1), pos + window * step)
        firsts = bytes(data[pos:stop:step])
        same = len(firsts) - len(firsts.lstrip(firsts_of))
        run += same
        cost += 4 * sum(firsts[:same].translate(_LONG_FOURS))
        if same < len(firsts) or stop < pos + window * step:
            return run, cost
        pos += same * step
        window = min(2 * window, 4096)


# -- runs of short tokens: one and two bytes, mixed -----------------------------------------
# A run of tokens of one or two bytes (nested or alternating empty containers, small numbers
# among them) is read in windows, each as a few operations on big integers that stand for its
# bytes, eight bits a byte ("lanes"), so that the work is done in C whatever the mix.
#
# Which bytes begin tokens follows from where the two-byte tokens are: after a byte that cannot
# begin one, the next byte begins a token (that byte ended one, whether it began it or was the
# second of a two-byte token). So in a stretch of bytes that could each begin a two-byte token,
# the tokens begin at every other byte from its start, and whether the byte after it begins a
# token or ends the last of them depends on the stretch's length: the carry of an addition
# that starts at each stretch on an even lane runs through it and clears exactly those, which
# tells the stretches that start on even lanes from those that start on odd ones.
_WINDOW_MIN, _WINDOW_MAX = 256, 1024  # a window's bytes are copied a few times: its memory
# Per byte: 0xff where a two-byte token begins with it, 0x01 where no short token does.
_SHORT_CLASS = bytes((0xFF if _LEN[b] == 2 else 0) if _KIND[b] == _SHORT else 1 for b in range(256))
# The charge of a short token by its first byte, in eights (every one is a multiple of eight).
_SHORT_EIGHTS = bytes(_CHARGE[b] // 8 if _KIND[b] == _SHORT else 0 for b in range(256))
_HIGH = int.from_bytes(b"\x80" * _WINDOW_MAX, "little")
_EVEN_ONE = int.from_bytes(b"\x01\x00" * (_WINDOW_MAX // 2), "little")
_ODD = int.from_bytes(b"\x00\xff" * (_WINDOW_MAX // 2), "little")
_NIBBLE = int.from_bytes(b"\x0f" * _WINDOW_MAX, "little")


def _shorts(data: Sequence[int], pos: int, end: int, budget: int) -> tuple[int, int]:
    """Where the run of short tokens from pos (a token's first byte) ends, and their charge:
    at the first token that is not short, at end, or once the charge is over ``budget``."""
    cost = 0
    size = _WINDOW_MIN
    while pos < end:
        stop = min(end, pos + size)
        n = stop - pos
        chunk = bytes(data[pos:stop])
        # Names are reused as soon as a value is done with: the window's memory is a few
        # copies of its bytes, whatever its size.
        halts = int.from_bytes(chunk.translate(_SHORT_CLASS), "little")
        two = ((halts & _HIGH) >> 7) * 0xFF
        halts ^= two
        even = two & (two << 8)
        even = two ^ (two & (two + ((two ^ even) & _EVEN_ONE)))
        # The lane after each two-byte token's first byte: the rest of that token.
        rest = (two & (even ^ _ODD)) << 8
        del two, even
        # A two-byte token that begins on the last byte is read again with the byte after
        # it, or, at end, by the walk, which charges a token cut short.
        took = n - 1 if rest >> 8 * n else n
        halts ^= halts & rest
        if halts:
            took = ((halts & -halts).bit_length() - 1) >> 3
        if took:
            eights = int.from_bytes(chunk.translate(_SHORT_EIGHTS), "little")
            eights ^= eights & rest
            if took < n:
                eights &= (1 << 8 * took) - 1
            cost += 8 * _lane_sum(eights, took)
        del chunk, rest
        pos += took
        if halts or stop == end or cost > budget:
            break
        size = min(2 * size, _WINDOW_MAX)
    return pos, cost


def _lane_sum(lanes: int, n: int) -> int:
    """The sum of the n bytes (each at most 255) that make up ``lanes``, little-endian."""
    if n < 512:
        return sum(lanes.to_bytes(n, "little"))
    # Split into nibbles, each of which can be added to 16 others in its byte without
    # overflowing it, and fold each half onto the other: the bytes to sum are a sixteenth.
    size = 1 << (n - 1).bit_length()
    low = lanes & _NIBBLE
    high = (lanes >> 4) & _NIBBLE
    for _ in range(4):
        size >>= 1
        half = (1 << 8 * size) - 1
        low = (low & half) + (low >> 8 * size)
        high = (high & half) + (high >> 8 * size)
    return sum(low.to_bytes(size, "little")) + 16 * sum(high.to_bytes(size, "little"))


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
