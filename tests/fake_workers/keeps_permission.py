"""A worker that reports, as the real one does, a Deno permission it could not revoke after
its self-test, and exits with that code before any handshake."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import EXIT_PERMISSION_KEPT, WORKER_PREFIX, exit_now, say

say(f"{WORKER_PREFIX}the net permission is still granted\n")
exit_now(EXIT_PERMISSION_KEPT)
