"""The escape battery's own detectors: each one fires when something does get through, so
that a quiet run of the battery means the sandbox held, not that nothing was watching."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from tests.security.escapes.harness import (
    Guest,
    Listener,
    assert_blocked,
    assert_never_mentions,
    assert_refused_by_permissions,
    attempt,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


def test_the_battery_would_notice_a_way_out(listener: Listener, sigwinch: list[int]) -> None:
    # An attempt that returns is reported as an escape, in the guest's isolate and its workers.
    guest = attempt("off", '{ "succeeds": () => 6 * 7, "throws": () => { throw new RangeError("no"); } }', {})
    assert guest.outcomes == {
        "main / succeeds": "ESCAPED: 42",
        "main / throws": "blocked: RangeError: no",
        "worker / succeeds": "ESCAPED: 42",
        "worker / throws": "blocked: RangeError: no",
        "node worker / succeeds": "ESCAPED: 42",
        "node worker / throws": "blocked: RangeError: no",
    }
    with pytest.raises(AssertionError, match="got out"):
        assert_blocked(guest.outcomes)
    with pytest.raises(AssertionError, match="not by a permission check"):
        assert_refused_by_permissions(guest.outcomes, "main / throws")
    with pytest.raises(AssertionError, match="reached the guest"):
        assert_never_mentions(Guest({"main / x": "blocked: Error: s3cret"}), "s3cret")
    with pytest.raises(AssertionError, match="reached the console"):
        assert_never_mentions(Guest({}, ["log: s3cret"]), "s3cret")
    # A connection or a datagram that reached the listener is seen.
    with (
        socket.create_connection(("127.0.0.1", listener.port)) as conn,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        udp.sendto(b"probe", ("127.0.0.1", listener.udp_port))
        time.sleep(0.05)
        visits = listener.visits()
        conn.close()
    assert len(visits) == 2, visits
    # A SIGWINCH that reached this process is recorded.
    os.kill(os.getpid(), signal.SIGWINCH)
    time.sleep(0.05)
    assert sigwinch == [signal.SIGWINCH]
