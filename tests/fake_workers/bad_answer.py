"""A worker that shakes hands properly, then answers the first eval with CASE's bad bytes.

Usage: ``bad_answer.py CASE [N]``: a key of ``CASES``, or ``truncated_exit`` /
``truncated_silent`` (half a frame, then exit or sleep). ``N`` is the length that
``length_over`` claims and the depth of ``deep_sets``. After its bad bytes the worker
idles, reading stdin, until the host kills it.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgpack
from _wirelib import (
    EXT_BIGINT,
    EXT_DATE,
    EXT_FUNCTION,
    EXT_JSON,
    EXT_SET,
    PROTOCOL_VERSION,
    W_CONSOLE,
    W_ERROR,
    W_HELLO,
    W_HOSTCALL,
    W_PART,
    W_RESULT,
    chosen_case,
    drain_until_eof,
    exit_now,
    frame,
    hello,
    pack,
    read_eval,
    say,
    sleep_forever,
    write_raw,
)

Ext = msgpack.ExtType


def nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_sets(depth: int) -> bytes:
    """An EXT_SET holding an EXT_SET holding ... ``depth`` deep, as raw msgpack."""
    inner = pack([])
    for _ in range(depth):
        inner = pack([Ext(EXT_SET, inner)])
    return inner


def result(rid: int, value: object) -> bytes:
    return frame(pack([W_RESULT, rid, value]))


def result_raw(rid: int, raw_value: bytes) -> bytes:
    """A RESULT frame whose value is the given msgpack bytes, verbatim."""
    return frame(b"\x93" + pack(W_RESULT) + pack(rid) + raw_value)


def part(rid: int, items: list[object]) -> bytes:
    return frame(pack([W_PART, rid, items]))


def arg(default: int) -> int:
    return int(sys.argv[2]) if len(sys.argv) > 2 else default


CASES: dict[str, Callable[[int], bytes]] = {
    # -- framing --
    "garbage_text": lambda rid: b"Listening on http://0.0.0.0:8000/\n",
    "garbage_msgpack": lambda rid: frame(b"\xc1\xc1\xc1\xc1"),
    "length_4gib": lambda rid: b"\xff\xff\xff\xff" + b"x" * 64,
    "length_over": lambda rid: struct.pack(">I", arg(1025)) + b"x" * 64,
    "empty_frame": lambda rid: frame(b""),
    "trailing_bytes": lambda rid: frame(pack([W_RESULT, rid, 1]) + b"\x00"),
    "array_length_lie": lambda rid: frame(b"\x93" + pack(W_RESULT) + pack(rid) + b"\xdd\x7f\xff\xff\xff"),
    # -- shapes --
    "not_an_array": lambda rid: frame(pack({"kind": W_RESULT, "id": rid})),
    "a_scalar": lambda rid: frame(pack(7)),
    "empty_array": lambda rid: frame(pack([])),
    "kind_not_int": lambda rid: frame(pack([str(W_RESULT), rid, 1])),
    "unknown_kind": lambda rid: frame(pack([99, rid, 1])),
    "result_wrong_arity": lambda rid: frame(pack([W_RESULT, rid])),
    "result_id_not_int": lambda rid: frame(pack([W_RESULT, str(rid), 1])),
    "error_not_strings": lambda rid: frame(pack([W_ERROR, rid, "Error", 42, "", []])),
    "second_hello": lambda rid: frame(pack([W_HELLO, PROTOCOL_VERSION, "2.0.0", "13.0", []])),
    "console_bad_level": lambda rid: frame(pack([W_CONSOLE, "shout", "hi"])),
    "console_unhashable_level": lambda rid: frame(pack([W_CONSOLE, ["log"], "hi"])),
    "console_text_not_str": lambda rid: frame(pack([W_CONSOLE, "log", b"bytes"])),
    # -- bookkeeping --
    "unknown_result_id": lambda rid: result(rid + 1000, 1),
    "unknown_error_id": lambda rid: frame(pack([W_ERROR, rid + 1000, "Error", "boom", "", []])),
    "unknown_part_id": lambda rid: part(rid + 1000, [1]),
    # Parts of 400 KiB each: every frame is under the 1 MiB limit, their sum is not.
    "parts_over_limit": lambda rid: b"".join(part(rid, [b"x" * 400 * 1024]) for _ in range(3)) + result(rid, []),
    "last_part_not_array": lambda rid: part(rid, [1, 2]) + result(rid, {"three": 3}),
    "part_not_array": lambda rid: frame(pack([W_PART, rid, {"one": 1}])),
    "unbound_hostcall": lambda rid: frame(pack([W_HOSTCALL, 1, "never_bound", []])),
    "hostcall_args_not_list": lambda rid: frame(pack([W_HOSTCALL, 1, "never_bound", {}])),
    # -- values --
    "deep_200": lambda rid: result(rid, nested(200)),
    "deep_1000": lambda rid: result(rid, nested(1000)),
    "deep_100000": lambda rid: result_raw(rid, b"\x91" * 100_000 + b"\x90"),
    "deep_maps": lambda rid: result_raw(rid, b"\x81\x00" * 300 + b"\x80"),
    "deep_sets": lambda rid: result_raw(rid, nested_sets(arg(5000))),
    "deep_json": lambda rid: result(rid, Ext(EXT_JSON, b"[" * 100_000 + b"]" * 100_000)),
    "unknown_ext": lambda rid: result(rid, Ext(42, b"?")),
    "bigint_bad_sign": lambda rid: result(rid, Ext(EXT_BIGINT, b"\x07ff")),
    "bigint_no_digits": lambda rid: result(rid, Ext(EXT_BIGINT, b"\x00")),
    "bigint_not_hex": lambda rid: result(rid, Ext(EXT_BIGINT, b"\x00zz")),
    "date_short": lambda rid: result(rid, Ext(EXT_DATE, b"\x00" * 7)),
    "date_nan": lambda rid: result(rid, Ext(EXT_DATE, struct.pack(">d", float("nan")))),
    "date_far_future": lambda rid: result(rid, Ext(EXT_DATE, struct.pack(">d", 8.64e20))),
    "function_handle_short": lambda rid: result(rid, Ext(EXT_FUNCTION, b"\x01")),
    "set_not_a_list": lambda rid: result(rid, Ext(EXT_SET, pack({"a": 1}))),
    "set_of_lists": lambda rid: result(rid, Ext(EXT_SET, pack([[1], [2]]))),
    "json_not_json": lambda rid: result(rid, Ext(EXT_JSON, b"{nope")),
    "invalid_utf8": lambda rid: result_raw(rid, b"\xa2\xff\xfe"),
    "invalid_utf8_key": lambda rid: result_raw(rid, b"\x81\xa2\xc3\x28\x01"),
    "map_list_key": lambda rid: result_raw(rid, b"\x81\x91\x01\x01"),
}


def main() -> None:
    name = chosen_case()
    if name in ("truncated_exit", "truncated_silent"):
        hello()
        rid = read_eval()
        whole = frame(pack([W_RESULT, rid, "x" * 100]))
        write_raw(whole[:20])
        if name == "truncated_exit":
            say("stopped half-way through a frame\n")
            exit_now(0)
        sleep_forever()
    hello()
    rid = read_eval()
    write_raw(CASES[name](rid))
    drain_until_eof()


if __name__ == "__main__":
    main()
