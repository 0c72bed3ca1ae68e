"""host/process/mailbox: the count of bytes the host wrote to a worker's stdin, which the worker
polls instead of sleeping in read(). The worker opens it before the handshake, the host then
drops its name, nothing of it outlives the runtime, and a count that lies only makes the
worker sleep."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import pydeno
from pydeno.host.process import staging
from pydeno.host.process.mailbox import Mailbox


def _count(path: Path) -> int:
    return int.from_bytes(path.read_bytes(), "little")


def test_a_new_mailbox_holds_a_zero_count_readable_by_others(tmp_path: Path) -> None:
    box = Mailbox(tmp_path / "mail")
    try:
        assert box.path is not None
        assert _count(box.path) == 0
        assert stat.S_IMODE(box.path.stat().st_mode) == 0o644
    finally:
        box.close()


def test_posted_bytes_add_up_as_a_little_endian_count(tmp_path: Path) -> None:
    box = Mailbox(tmp_path)
    try:
        assert box.path is not None
        box.posted(5)
        box.posted(2**40)
        assert box.path.read_bytes() == (5 + 2**40).to_bytes(8, "little")
    finally:
        box.close()


def test_close_unlinks_closes_and_may_be_repeated(tmp_path: Path) -> None:
    box = Mailbox(tmp_path)
    path = box.path
    assert path is not None
    box.close()
    box.close()
    box.posted(1)  # after close: ignored, never raises
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_first_mailbox_of_a_process_removes_those_of_hosts_that_are_gone(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"mailbox-{gone.pid}-00ff"
    live = tmp_path / f"mailbox-{os.getppid()}-00ff"  # a running process: left alone
    other = tmp_path / "not-a-mailbox"
    for path in (stale, live, other):
        path.write_bytes(bytes(8))
    box = Mailbox(tmp_path)
    try:
        assert not stale.exists()
        assert live.exists() and other.exists()
    finally:
        box.close()


def _worker_fds(pid: int) -> list[str]:
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return targets


@pytest.mark.parametrize("sandbox", ["require", "off"])
def test_the_worker_holds_its_mailbox_open_and_its_name_is_gone_after_the_handshake(sandbox: str) -> None:
    with pydeno.Runtime(sandbox=sandbox) as rt:  # type: ignore[arg-type]
        process = rt._sup.process
        assert process is not None and process.mailbox is not None
        assert process.mailbox.path is None  # unlinked once the worker shook hands
        name = process.config.mailbox
        assert name is not None and not os.path.exists(name)
        opened = [t for t in _worker_fds(process.pid) if "mailbox-" in t]
        assert opened == [f"{name} (deleted)"]
        assert rt.eval("1 + 1") == 2


def test_the_guest_cannot_read_files_next_to_its_mailbox() -> None:
    mail = staging.staged().cache / "mail"
    mail.mkdir(exist_ok=True)
    decoy = mail / "decoy"
    decoy.write_text("secret")
    try:
        with pydeno.Runtime(sandbox="off") as rt:
            code = f"const fs = await import('node:fs'); fs.readFileSync({str(decoy)!r}, 'utf8')"
            with pytest.raises(pydeno.JavaScriptError) as info:
                rt.eval(code)
            assert "secret" not in str(info.value)
    finally:
        decoy.unlink()


def test_a_count_that_runs_ahead_of_the_pipe_only_makes_the_worker_sleep() -> None:
    with pydeno.Runtime() as rt:
        process = rt._sup.process
        assert process is not None and process.mailbox is not None
        process.mailbox.posted(10**9)  # claims bytes the pipe never had
        for i in range(50):
            assert rt.eval(f"{i} * 2") == i * 2


def test_a_runtime_starts_without_a_mailbox_when_none_can_be_made(launch: Callable[..., None]) -> None:
    def refuse(directory: Path) -> Mailbox:
        raise PermissionError(13, "Permission denied", str(directory))

    launch(mailbox=refuse)
    with pydeno.Runtime() as rt:
        assert rt._sup.process is not None and rt._sup.process.mailbox is None
        assert rt.eval("[1, 2].map(x => x * 3)") == [3, 6]
