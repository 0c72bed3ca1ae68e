"""A worker that reports, as the real one does, a Deno permission it could not revoke after
its self-test, and exits with that code before any handshake."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _wirelib import exit_now, say

say("pydeno worker: the net permission is still granted\n")
exit_now(72)
