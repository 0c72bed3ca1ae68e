"""A worker that goes wrong before or during the handshake.

Usage: ``bad_handshake.py CASE``: one of ``FIRST_FRAMES`` (its first bytes on stdout, then
it idles), or ``silent``, ``exit_with_stderr``, ``killed``, ``truncated_hello_then_silent``,
``truncated_hello_then_exit``, ``garbage_after_hello`` (garbage glued to a good handshake).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import (
    HELLO,
    PROTOCOL_VERSION,
    W_CONSOLE,
    W_HELLO,
    W_RESULT,
    chosen_case,
    drain_until_eof,
    exit_now,
    frame,
    pack,
    say,
    send,
    sleep_forever,
    write_raw,
)

FIRST_FRAMES: dict[str, bytes] = {
    "garbage": b"Deno is starting up...\n",
    "garbage_msgpack": frame(b"\xc1"),
    "wrong_protocol": frame(pack([W_HELLO, PROTOCOL_VERSION + 1, "2.0.0", "13.0", []])),
    "protocol_not_int": frame(pack([W_HELLO, str(PROTOCOL_VERSION), "2.0.0", "13.0", []])),
    "versions_not_str": frame(pack([W_HELLO, PROTOCOL_VERSION, 2, 13, []])),
    "hello_not_array": frame(pack({"protocol": 1})),
    "result_first": frame(pack([W_RESULT, 1, None])),
    "console_first": frame(pack([W_CONSOLE, "log", "hi"])),
}


def main() -> None:
    case = chosen_case()
    if case == "silent":
        sleep_forever()
    if case == "exit_with_stderr":
        say("error: Uncaught (in promise) TypeError: the worker could not start\n    at main.ts:1:1\n")
        exit_now(1)
    if case == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if case == "truncated_hello_then_silent":
        write_raw(frame(pack(HELLO))[:7])
        sleep_forever()
    if case == "truncated_hello_then_exit":
        write_raw(frame(pack(HELLO))[:7])
        exit_now(0)
    if case == "garbage_after_hello":
        # The garbage arrives glued to a good handshake, before any command.
        send(HELLO)
        write_raw(b"\x00\x00\x00\x02\xc1\xc1")
        drain_until_eof()
    write_raw(FIRST_FRAMES[case])
    drain_until_eof()


if __name__ == "__main__":
    main()
