"""Determinism for replays and tests: a seeded ``Math.random`` and ``crypto`` and a fixed
clock, installed in a runtime before any guest code.

``random_seed=`` (an int below 2**128) makes ``Math.random``, ``crypto.getRandomValues`` and
``crypto.randomUUID`` draw from a generator (sfc32) seeded with it; ``clock=`` (a timezone-
aware ``datetime``, or seconds since the epoch) fixes ``Date``, ``Date.now()`` at it and
``performance.now()`` at 0. Each is installed non-configurable, so guest code cannot put the
real ones back. Web Workers the guest starts are not covered.
"""

from __future__ import annotations

import datetime
import math
from typing import Any, Final

__all__ = ["check_clock", "check_seed", "prelude"]

_RANDOM: Final = """  let a = %(a)d >>> 0, b = %(b)d >>> 0, c = %(c)d >>> 0, d = %(d)d >>> 0;
  const next = () => {  // sfc32
    a >>>= 0; b >>>= 0; c >>>= 0; d >>>= 0;
    let t = (a + b) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    d = (d + 1) | 0;
    t = (t + d) | 0;
    c = (c + t) | 0;
    return t >>> 0;
  };
  const random = () => next() / 4294967296;
  Object.defineProperty(Math, "random", { value: random, writable: false, configurable: false });
  const fill = (array) => {
    const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    for (let i = 0; i < bytes.length; i++) bytes[i] = next() & 0xff;
    return array;
  };
  const hex = () => next().toString(16).padStart(8, "0");
  const uuid = () => {
    const h = hex() + hex() + hex() + hex();
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
  };
  Object.defineProperty(crypto, "getRandomValues", { value: fill, writable: false, configurable: false });
  Object.defineProperty(crypto, "randomUUID", { value: uuid, writable: false, configurable: false });
"""

_CLOCK: Final = """  const clock = %(clock)d;
  const RealDate = Date;
  function FixedDate(...args) {
    if (!new.target) return new RealDate(clock).toString();
    return args.length ? new RealDate(...args) : new RealDate(clock);
  }
  FixedDate.prototype = RealDate.prototype;
  FixedDate.now = () => clock;
  FixedDate.parse = RealDate.parse;
  FixedDate.UTC = RealDate.UTC;
  Object.defineProperty(globalThis, "Date", { value: FixedDate, writable: false, configurable: false });
  Object.defineProperty(performance, "now", { value: () => 0, writable: false, configurable: false });
"""


def prelude(seed: int | None, clock_ms: int | None) -> str:
    """The guest code that installs the seeded generator and the fixed clock (either may be
    None: that one is left as it is)."""
    parts = ["(() => {\n"]
    if seed is not None:
        import hashlib  # not with the package: OpenSSL's bindings load slowly, for a seed's hash

        # The generator's state is a hash of the seed: sfc32 started from a small seed (7,
        # say) gives near-zero numbers for its first dozen outputs.
        state = int.from_bytes(hashlib.blake2b(seed.to_bytes(16, "little"), digest_size=16).digest(), "little")
        words = [(state >> shift) & 0xFFFFFFFF for shift in (0, 32, 64, 96)]
        parts.append(_RANDOM % {"a": words[0], "b": words[1], "c": words[2], "d": words[3]})
    if clock_ms is not None:
        parts.append(_CLOCK % {"clock": clock_ms})
    parts.append("})()")
    return "".join(parts)


def check_seed(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"random_seed must be an int or None, got {type(value).__name__}")
    if not 0 <= value < 2**128:
        raise ValueError(f"random_seed must be at least 0 and below 2**128, got {value}")
    return value


def check_clock(value: Any) -> int | None:
    """clock= as milliseconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(
                "clock must be a timezone-aware datetime (datetime.now(timezone.utc), say), got a naive one"
            )
        return math.floor(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"clock must be a finite number of seconds since the epoch, got {value}")
        return math.floor(value * 1000)
    raise TypeError(f"clock must be a datetime, seconds since the epoch, or None, got {type(value).__name__}")
