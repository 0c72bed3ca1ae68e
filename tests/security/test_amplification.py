"""Decoding amplification: values built so that a few bytes on the wire become many bytes of
Python objects on the host (one empty Map, object or array reused at every position travels
as a tree of them: one byte each, a 64-byte dict or list and its slot each on the host).

The host charges every frame from the worker what decoding it builds before decoding it,
and refuses one over ``max_decode_ratio`` bytes per byte plus 1 MiB (pydeno/host/wire/budget.py). An
honest worker refuses such a value first, with an error naming the option; a forged frame
kills the worker as a protocol violation. Realistic data is never refused.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgpack
import psutil
import pytest

import pydeno
from pydeno.host.wire.codec import Codec
from pydeno.host.wire.connection import Connection, ProtocolError, frame
from pydeno.host.wire.protocol import PROTOCOL_VERSION

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

FakeWorker = Callable[..., None]

LINUX_X86_64: Final = sys.platform == "linux" and os.uname().machine == "x86_64"
MODES: Final = [
    pytest.param("require", marks=pytest.mark.skipif(not LINUX_X86_64, reason="the OS layers are Linux x86_64 only")),
    "off",
]
REFUSAL: Final = re.compile(
    r"value would take about \d+ bytes of host memory to decode, over the \d+ its \d+ bytes allow "
    r"\(max_decode_ratio=40 per byte, plus 1048576\): raise max_decode_ratio= for a value of many tiny "
    r"containers or numbers"
)
MiB: Final = 2**20


@pytest.fixture(params=MODES)
def rt(request: pytest.FixtureRequest) -> Iterator[pydeno.Runtime]:
    with pydeno.Runtime(sandbox=request.param, timeout=60) as runtime:
        yield runtime


# -- an honest worker refuses the value ---------------------------------------------------------
AMPLIFYING = [
    pytest.param("const m = new Map(); Array.from({length: 2_000_000}, () => m)", id="shared empty Map, in parts"),
    pytest.param("const o = {}; Array.from({length: 2_000_000}, () => o)", id="shared empty object, JSON, in parts"),
    pytest.param(
        "const m = new Map(); const row = Array.from({length: 3000}, () => m); Array.from({length: 1000}, () => row)",
        id="a shared row of shared empty Maps, one frame",
    ),
    pytest.param(
        "const row = Array.from({length: 3000}, () => ({})); Array.from({length: 1000}, () => row)",
        id="a shared row of empty objects, JSON lane, one frame",
    ),
    pytest.param("const e = [[[[[[]]]]]]; Array.from({length: 500_000}, () => e)", id="nested empty arrays, JSON lane"),
]


@pytest.mark.parametrize("code", AMPLIFYING)
def test_a_result_built_to_amplify_is_refused_with_an_error_naming_max_decode_ratio(
    rt: pydeno.Runtime, code: str
) -> None:
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval(code)
    assert info.value.name == "RangeError"
    assert info.value.message.startswith("result could not be converted: "), info.value.message
    assert REFUSAL.search(info.value.message), info.value.message
    assert pydeno.classify_error(info.value).kind == "invalid_input"
    assert rt.eval("'still alive'") == "still alive"


def test_host_call_arguments_built_to_amplify_are_refused_in_the_guest_before_the_function_runs(
    rt: pydeno.Runtime,
) -> None:
    calls: list[int] = []
    rt.bind_function("f", lambda *args: calls.append(len(args)))
    caught = rt.eval(
        "const m = new Map();"
        "try { await f(Array.from({length: 300_000}, () => m)); 'sent' } catch (e) { `${e.name}: ${e.message}` }"
    )
    assert caught.startswith("TypeError: arguments to f() could not be converted: "), caught
    assert REFUSAL.search(caught), caught
    assert calls == []


def test_an_uncaught_refusal_of_host_call_arguments_is_invalid_input(rt: pydeno.Runtime) -> None:
    rt.bind_function("f", lambda *args: None)
    with pytest.raises(pydeno.JavaScriptError) as info:
        rt.eval("const o = {}; await f(Array.from({length: 1_000_000}, () => o))")
    assert REFUSAL.search(info.value.message), info.value.message
    assert pydeno.classify_error(info.value).kind == "invalid_input"


def test_raising_max_decode_ratio_lets_such_a_value_through() -> None:
    code = "const m = new Map(); Array.from({length: 100_000}, () => m)"
    with pydeno.Runtime(sandbox="off") as strict, pytest.raises(pydeno.JavaScriptError, match="max_decode_ratio=40"):
        strict.eval(code)
    with pydeno.Runtime(sandbox="off", max_decode_ratio=100) as generous:
        assert generous.eval(code) == [{}] * 100_000


# -- realistic data is never refused ------------------------------------------------------------
REALISTIC = [
    pytest.param("Array.from({length: 20000}, (_, i) => ({id: i, name: 'item' + i}))", 20000, id="records"),
    pytest.param("Array.from({length: 100000}, (_, i) => ({id: i}))", 100000, id="one-field records"),
    pytest.param(
        "Array.from({length: 20000}, (_, i) => ({id: i, name: 'item' + i, note: undefined}))",
        20000,
        id="records with undefined, msgpack lane",
    ),
    pytest.param(
        "Object.entries(Object.fromEntries(Array.from({length: 50000}, (_, i) => ['k' + i, i])))", 50000, id="pairs"
    ),
    pytest.param("Array.from({length: 100000}, (_, i) => [i, i + 1])", 100000, id="pairs of numbers"),
    pytest.param("Array.from({length: 200000}, (_, i) => i % 2 ? 'US' : 'FR')", 200000, id="two-letter strings"),
    pytest.param(
        "Array.from({length: 100000}, (_, i) => i % 2 ? 'US' : undefined)", 100000, id="two-letter strings, msgpack"
    ),
    pytest.param("new Int8Array(1_000_000).fill(-10)", 1_000_000, id="small negative numbers, msgpack"),
    pytest.param("Array.from({length: 300000}, (_, i) => -(i % 30))", 300000, id="small negative numbers"),
    pytest.param("Float64Array.from({length: 300000}, (_, i) => i / 3)", 300000, id="floats, msgpack"),
    pytest.param("Array.from({length: 100000}, (_, i) => new Date(i))", 100000, id="dates"),
    pytest.param(
        "Array.from({length: 20000}, (_, i) => ({a: {b: {c: [i, {d: 'x' + i}]}}}))", 20000, id="nested objects"
    ),
    pytest.param("Array.from({length: 100000}, () => [])", 100000, id="empty arrays, JSON lane"),
    pytest.param("Array.from({length: 50000}, (_, i) => new Map([[i, 'v' + i]]))", 50000, id="one-entry Maps"),
]


@pytest.mark.parametrize(("code", "length"), REALISTIC)
def test_realistic_data_is_never_refused(rt: pydeno.Runtime, code: str, length: int) -> None:
    assert len(rt.eval(code)) == length


# -- a forged frame kills the worker ------------------------------------------------------------
FORGED = [
    pytest.param("result", 200_000, "a frame of ", id="a result"),
    pytest.param("json", 200_000, "a frame of ", id="a JSON-lane result"),
    pytest.param("parts", 20_000, "a result in parts ", id="parts each within its own allowance"),
    pytest.param("hostcall", 200_000, "a frame of ", id="host call arguments"),
    pytest.param("console", 200_000, "a frame of ", id="console output"),
    pytest.param("error", 200_000, "a frame of ", id="an error message"),
]


@pytest.mark.parametrize(("case", "n", "what"), FORGED)
def test_a_forged_frame_over_the_decode_allowance_kills_the_worker_as_a_protocol_violation(
    fake_worker: FakeWorker, case: str, n: int, what: str
) -> None:
    fake_worker("amplifying", case, str(n))
    rt = pydeno.Runtime(timeout=20, startup_timeout=10)
    try:
        rt.bind_function("f", lambda *args: None)
        with pytest.raises(pydeno.WorkerCrashed) as info:
            rt.eval("1")
        message = str(info.value)
        assert message.startswith(f"worker broke protocol: {what}"), message
        assert "would take about" in message and "(max_decode_ratio=40 per byte, plus 1048576)" in message, message
        assert pydeno.classify_error(info.value).kind == "protocol_violation"
        assert rt.closed
    finally:
        rt.close()


class PeakRss:
    """The host's peak resident size while the block runs, sampled from another thread."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.start = self.peak = self._process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.start


@pytest.mark.parametrize("case", ["result", "console"])
def test_a_refused_frame_costs_the_host_next_to_nothing(fake_worker: FakeWorker, case: str) -> None:
    n = 8 * MiB  # empty maps, one byte each: about 600 MiB of dicts if it were decoded
    fake_worker("amplifying", case, str(n))
    rt = pydeno.Runtime(timeout=60, startup_timeout=10, max_message_bytes=64 * MiB)
    try:
        with PeakRss() as rss, pytest.raises(pydeno.WorkerCrashed, match="max_decode_ratio=40"):
            rt.eval("1")
        # The frame's own bytes, as read, and next to nothing besides.
        assert rss.growth < 4 * n, f"host RSS grew {rss.growth / MiB:.0f} MiB for a {n / MiB:.0f} MiB frame"
    finally:
        rt.close()


def test_an_accepted_frame_grows_host_memory_by_at_most_max_decode_ratio_per_byte(fake_worker: FakeWorker) -> None:
    n = 1_000_000  # two-byte strings: three bytes each on the wire, what the model allows most of
    fake_worker("amplifying", "strings", str(n))
    with pydeno.Runtime(timeout=60, startup_timeout=10, max_message_bytes=64 * MiB) as rt:
        value: Any = None
        with PeakRss() as rss:
            value = rt.eval("1")
        assert len(value) == n
        frame_bytes = 3 * n + 10
        assert rss.growth < 40 * frame_bytes + MiB, f"host RSS grew {rss.growth / frame_bytes:.1f}x"


# -- the worker charges what the host charges ---------------------------------------------------
AGREEMENT = [
    pytest.param(
        "const m = new Map(); const row = Array.from({length: 3000}, () => m); Array.from({length: 100}, () => row)",
        id="Maps, one frame",
    ),
    pytest.param(
        "const row = Array.from({length: 2000}, () => ({})); Array.from({length: 100}, () => row)",
        id="objects, JSON lane, one frame",
    ),
    pytest.param("Array.from({length: 100000}, (_, i) => i % 3 ? new Map() : 'ab')", id="Maps and strings, in parts"),
    pytest.param("Array.from({length: 100000}, (_, i) => [i % 7])", id="arrays, JSON lane, in parts"),
    pytest.param(
        "Array.from({length: 3000}, (_, i) => [new Date(i), 10n ** 30n, new Set([i, 'x']), undefined, -10, 'é€😀'])",
        id="every extension type",
    ),
    pytest.param("Array.from({length: 3000}, (_, i) => new Error('e', {cause: i % 2 ? i : []}))", id="Errors"),
    pytest.param(
        "Array.from({length: 3000}, (_, i) => Object.fromEntries("
        "Array.from({length: 20}, (_, k) => ['k' + k, k % 2 ? undefined : i])))",
        id="records of twenty fields",
    ),
    pytest.param("new Int8Array(1_000_000).fill(-10)", id="small negative numbers"),
]


def _frames_of(code: str) -> list[bytes]:
    """The payloads of the frames answering code, as the host receives them."""
    frames: list[bytes] = []
    with pydeno.Runtime(sandbox="off", timeout=60, max_decode_ratio=10**6) as rt:
        codec = rt._sup.core.connection.codec
        real = codec.unpack_counted

        def spy(data: Any, allowance: int) -> tuple[Any, int]:
            frames.append(bytes(data))
            return real(data, allowance)

        codec.unpack_counted = spy  # type: ignore[method-assign]
        rt.eval(code)
    return frames


def _host_accepts(frames: list[bytes], ratio: int) -> bool:
    """Whether the host, at this ratio, takes these frames as the answer to its first eval."""
    conn = Connection(Codec(lambda i: i, lambda value: None, 64 * MiB, max_decode_ratio=ratio), 64 * MiB)
    conn.feed(frame(msgpack.packb([0, PROTOCOL_VERSION, "2.0.0", "13.0", []])))
    conn.next_event()
    conn.eval("")
    conn.feed(b"".join(frame(f) for f in frames))
    try:
        while conn.next_event() is not None:
            pass
    except ProtocolError as exc:
        assert "max_decode_ratio" in exc.detail, exc.detail
        return False
    return True


@pytest.mark.parametrize("code", AGREEMENT)
def test_the_worker_refuses_exactly_what_the_host_would_at_any_ratio(code: str) -> None:
    frames = _frames_of(code)
    low, high = 1, 1000  # the least ratio the host accepts these frames at, by bisection
    assert _host_accepts(frames, high) and not _host_accepts(frames, low)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _host_accepts(frames, middle) else (middle, high)
    with pydeno.Runtime(sandbox="off", timeout=60, max_decode_ratio=high) as rt:
        rt.eval(code)
    with pydeno.Runtime(sandbox="off", timeout=60, max_decode_ratio=low) as rt:
        with pytest.raises(pydeno.JavaScriptError) as info:
            rt.eval(code)
        assert f"max_decode_ratio={low} per byte" in info.value.message, info.value.message
        assert rt.eval("1") == 1
