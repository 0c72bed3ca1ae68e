"""The mailbox: how many bytes the host has written to a worker's stdin, in a file.

A pipe write that wakes a sleeping reader costs the writer tens of microseconds on a VM (an
inter-processor interrupt through the hypervisor), about half of a warm eval. A file read
never sleeps, so a worker that expects input soon polls this count instead of sleeping in
``read()`` (worker/main.ts, ``waitForInput``) and reads its stdin once the count is ahead
of what it has read. The count is written *after* the bytes are in the pipe, so a count the
worker sees is always backed by bytes it can read without blocking.

The file lives in the worker's cache directory, which the confined worker may read; the
worker opens it with a Deno read grant for that one path, revokes the grant, and the host
unlinks the file once the worker has answered the handshake. A host killed before that
leaves its files behind; their names carry the host's pid, and the first mailbox a process
makes removes those of hosts no longer running. Only the host writes it; the
host never reads it, so a guest that found a way to write it could only make its own worker
poll or sleep at the wrong time.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from pathlib import Path

from ..wire.protocol import MAILBOX_COUNT_BYTES

__all__ = ["Mailbox"]

_NAME = re.compile(r"mailbox-(\d+)-[0-9a-f]+")
_swept: set[Path] = set()
_sweep_lock = threading.Lock()


def host_running(pid: int) -> bool:
    """Whether a process of that pid runs (a host whose leftovers are still its own)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: running, and not ours to judge
    return True


def _sweep(directory: Path) -> None:
    """Remove the mailboxes of hosts that are gone, once per directory and process."""
    with _sweep_lock:
        if directory in _swept:
            return
        _swept.add(directory)
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            match = _NAME.fullmatch(entry.name)
            if match and not host_running(int(match.group(1))):
                with contextlib.suppress(OSError):
                    entry.unlink()


class Mailbox:
    """One worker's count of bytes written, created before the worker starts."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o755, exist_ok=True)
        _sweep(directory)
        # os.urandom is what secrets.token_hex reads, without the import of secrets.
        self.path: Path | None = directory / f"mailbox-{os.getpid()}-{os.urandom(8).hex()}"
        # Readable by the worker, which may run as another user (a root host drops to
        # nobody); writable by the host alone.
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(self._fd, 0o644)  # whatever the umask
            os.pwrite(self._fd, bytes(MAILBOX_COUNT_BYTES), 0)
        except BaseException:
            self.close()
            raise
        self._written = 0

    def posted(self, n: int) -> None:
        """n more bytes are in the worker's stdin."""
        self._written += n
        # Not contextlib.suppress, which costs three calls: this runs on every frame written.
        try:  # noqa: SIM105
            os.pwrite(self._fd, self._written.to_bytes(MAILBOX_COUNT_BYTES, "little"), 0)
        except OSError:
            pass

    def unlink(self) -> None:
        """The worker has the file open (it answered the handshake): drop its name."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.path = None

    def close(self) -> None:
        """Unlink and close. Idempotent."""
        self.unlink()
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
