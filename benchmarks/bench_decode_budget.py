#!/usr/bin/env python3
"""Host memory per byte of a frame from the worker, for the shapes that cost most to decode.

Each case is one RESULT frame, decoded by the host's own connection (pydeno/host/wire/connection.py)
from bytes already in memory, in a fresh interpreter: the growth of its resident size (peak
and after, with the value still held) over the frame's bytes is the number that the decode
budget bounds. A shape alone is as many items as the frame's size allows; "at the limit"
adds the filler that gives it the most room under the budget (binary data, charged what it
takes), so that the frame is the costliest the host accepts. A refused frame is timed and
measured the same way.

Usage::

    python benchmarks/bench_decode_budget.py            # every case, 16 MiB frames
    python benchmarks/bench_decode_budget.py --mib 4    # smaller frames
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 2**20
HELLO = [0, 3, "2.0.0", "13.0", []]


def _array(items: list[bytes]) -> bytes:
    return b"\xdd" + struct.pack(">I", len(items)) + b"".join(items)


def _json(text: str) -> bytes:
    payload = text.encode()
    return b"\xc9" + struct.pack(">I", len(payload)) + b"\x05" + payload


# One item of each shape, as msgpack, and its JSON counterpart where there is one.
MSGPACK_ITEMS: dict[str, bytes] = {
    "empty maps": b"\x80",
    "empty arrays": b"\x90",
    "nested empties [[[[]]]]": b"\x91\x91\x91\x90",
    "one-entry maps {0: nil}": b"\x81\x00\xc0",
    "2-char strings": b"\xa2ab",
    "negative fixints (-10)": b"\xf6",
    "large ints (2**63 - 1)": b"\xd3" + struct.pack(">q", 2**63 - 1),
    "floats": b"\xcb" + struct.pack(">d", 0.5),
}
JSON_ITEMS: dict[str, str] = {
    "empty objects": "{}",
    "empty arrays": "[]",
    "nested empties [[[[]]]]": "[[[[]]]]",
    "one-key objects": '{"a":0}',
    "2-char strings": '"ab"',
    "negative numbers (-10)": "-10",
    "large ints (2**53 - 1)": str(2**53 - 1),
    "floats": "0.5",
}


def _frame_bytes(value: bytes) -> bytes:
    return b"\x93\x01\x01" + value


def build(lane: str, shape: str, size: int, at_limit: bool, ratio: int) -> bytes:
    """The payload of a RESULT frame of about ``size`` bytes."""
    if lane == "msgpack":
        item = MSGPACK_ITEMS[shape]

        def make(n: int, filler: int) -> bytes:
            items = [item] * n
            if filler:
                items.append(b"\xc6" + struct.pack(">I", filler) + b"\x00" * filler)
            return _frame_bytes(_array(items))

        per = len(item)
    else:
        text = JSON_ITEMS[shape]

        def make(n: int, filler: int) -> bytes:
            value = _json("[" + ",".join([text] * n) + "]")
            if filler:
                value = _array([value, b"\xc6" + struct.pack(">I", filler) + b"\x00" * filler])
            return _frame_bytes(value)

        per = len(text) + 1
    n = size // per
    if not at_limit:
        return make(n, 0)
    # The most items that fit under the budget with filler making up the rest of size.
    from pydeno.host.wire.budget import frame_cost
    from pydeno.host.wire.protocol import DECODE_FLOOR

    low, high = 0, n
    while high - low > 1:
        middle = (low + high) // 2
        data = make(middle, max(0, size - middle * per))
        if frame_cost(data, 64 * MiB, []) <= ratio * len(data) + DECODE_FLOOR:
            low = middle
        else:
            high = middle
    return make(low, max(0, size - low * per))


def measure(data: bytes, ratio: int) -> dict[str, Any]:
    """In this (fresh) process: decode data through a connection, and what that cost."""
    import gc
    import threading

    import msgpack
    import psutil

    from pydeno.host.wire.codec import Codec
    from pydeno.host.wire.connection import Connection, ProtocolError, frame

    conn = Connection(Codec(lambda i: i, lambda value: None, 64 * MiB, max_decode_ratio=ratio), 64 * MiB)
    conn.feed(frame(msgpack.packb(HELLO)))
    conn.next_event()
    conn.eval("")
    conn.feed(frame(data))
    del data
    gc.collect()
    process = psutil.Process()
    before = peak = process.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.001):
            peak = max(peak, process.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    refused = None
    try:
        conn.next_event()
        value = conn.take(1)
    except ProtocolError as exc:
        refused, value = exc.detail, None
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    after = process.memory_info().rss
    del value
    return {
        "refused": refused,
        "seconds": elapsed,
        "rss_growth": after - before,
        "peak_growth": max(peak, after) - before,
    }


def run_case(lane: str, shape: str, size: int, at_limit: bool, ratio: int) -> dict[str, Any]:
    args = json.dumps([lane, shape, size, at_limit, ratio])
    # The pydeno beside this script, not one installed elsewhere.
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", args], capture_output=True, text=True, check=True, env=env
    ).stdout
    return dict(json.loads(out))


def child(spec: str) -> None:
    lane, shape, size, at_limit, ratio = json.loads(spec)
    data = build(lane, shape, size, at_limit, ratio)
    result = measure(data, ratio)
    result["bytes"] = len(data) + 4
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=16, help="frame size in MiB (default 16)")
    parser.add_argument("--ratio", type=int, default=40, help="max_decode_ratio (default 40)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child)
        return
    size = options.mib * MiB
    cases: list[tuple[str, str, bool]] = [
        *(
            (lane, shape, at_limit)
            for lane, items in (("msgpack", MSGPACK_ITEMS), ("json", JSON_ITEMS))
            for shape in items
            for at_limit in (False, True)
        ),
    ]
    show: Callable[[float], str] = lambda x: f"{x:6.1f}x"  # noqa: E731
    print(f"frames of {options.mib} MiB, max_decode_ratio={options.ratio}; growth of host RSS per frame byte")
    print(f"{'lane':8} {'shape':26} {'':9} {'outcome':9} {'peak':>8} {'held':>8} {'time':>9}")
    for lane, shape, at_limit in cases:
        result = run_case(lane, shape, size, at_limit, options.ratio)
        outcome = "refused" if result["refused"] else "accepted"
        print(
            f"{lane:8} {shape:26} {'at limit' if at_limit else 'alone':9} {outcome:9} "
            f"{show(result['peak_growth'] / result['bytes'])} {show(result['rss_growth'] / result['bytes'])} "
            f"{result['seconds'] * 1e3:7.1f}ms"
        )


if __name__ == "__main__":
    main()
