"""The escape battery's host-side fixtures: the files a guest aims at, a TCP and UDP listener,
and a recorder of the signals the test process receives."""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.security.escapes.harness import MARKER_GLOBAL, MAX_ACCEPTS, Exposed, Listener


@pytest.fixture
def exposed() -> Iterator[Exposed]:
    root = Path(tempfile.mkdtemp(prefix="pydeno-escape-"))
    try:
        root.chmod(0o777)
        secret = "pydeno-secret-" + secrets.token_hex(12)
        quoted = json.dumps(secret)
        files = {
            "secret.txt": secret + "\n",
            "secret_module.js": f"globalThis.{MARKER_GLOBAL} = {quoted};\nexport default {quoted};\n",
            "secret_module.ts": (
                f"const secret: string = {quoted};\n"
                f"(globalThis as any).{MARKER_GLOBAL} = secret;\nexport default secret;\n"
            ),
            "secret_module.json": json.dumps({"secret": secret}),
            "secret_module.cjs": f"globalThis.{MARKER_GLOBAL} = {quoted};\nmodule.exports = {quoted};\n",
        }
        for name, text in files.items():
            (root / name).write_text(text)
            (root / name).chmod(0o644)
        yield Exposed(root, secret)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def listener() -> Iterator[Listener]:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(MAX_ACCEPTS)
        tcp.setblocking(False)
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        yield Listener(tcp, udp)
    finally:
        tcp.close()
        udp.close()


@pytest.fixture
def sigwinch() -> Iterator[list[int]]:
    """Records every SIGWINCH the test process receives while the test runs."""
    received: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGWINCH, record)
    try:
        yield received
    finally:
        signal.signal(signal.SIGWINCH, previous)
