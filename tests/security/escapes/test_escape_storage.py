"""The escape battery, storage: nothing a guest stores (localStorage, sessionStorage, the Cache
API) outlives its runtime for a later one to find, under every sandbox mode."""

from __future__ import annotations

import json
import secrets
from typing import Final

import pytest

from tests.security.escapes.harness import (
    MODES,
    PRELUDE,
    assert_blocked,
    assert_never_mentions,
    guest_program,
    open_runtime,
    run_guest,
)

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow


STORE_PROGRAM: Final = r"""
const __stored = {};
try { localStorage.setItem(__cfg.key, __cfg.token); __stored.localStorage = "stored"; }
catch (e) { __stored.localStorage = "refused: " + __describe(e); }
try { sessionStorage.setItem(__cfg.key, __cfg.token); __stored.sessionStorage = "stored"; }
catch (e) { __stored.sessionStorage = "refused: " + __describe(e); }
try {
  await (await caches.open(__cfg.key)).put(`https://pydeno.invalid/${__cfg.key}`, new Response(__cfg.token));
  __stored.caches = "stored";
} catch (e) { __stored.caches = "refused: " + __describe(e); }
__stored
"""

RETRIEVE_ATTEMPTS: Final = r"""{
  "localStorage left by an earlier runtime": () => {
    const v = localStorage.getItem(__cfg.key);
    if (v === null) throw __fail("NotFound", "nothing was left");
    return `read ${v}`;
  },
  "sessionStorage left by an earlier runtime": () => {
    const v = sessionStorage.getItem(__cfg.key);
    if (v === null) throw __fail("NotFound", "nothing was left");
    return `read ${v}`;
  },
  "Cache API entry left by an earlier runtime": async () => {
    if (!(await caches.has(__cfg.key))) throw __fail("NotFound", "no such cache");
    const hit = await (await caches.open(__cfg.key)).match(`https://pydeno.invalid/${__cfg.key}`);
    if (hit === undefined) throw __fail("NotFound", "the cache holds no entry");
    return `read ${await hit.text()}`;
  },
}"""

# Whatever a guest managed to store goes again, so that a failing run leaves nothing behind.
FORGET_POSTLUDE: Final = r"""
try { localStorage.removeItem(__cfg.key); } catch { /* never stored */ }
try { await caches.delete(__cfg.key); } catch { /* never stored */ }
"""


@pytest.mark.parametrize("mode", MODES)
def test_a_runtime_cannot_leave_data_for_a_later_runtime(mode: str) -> None:
    """Web storage that persists (localStorage, the Cache API) would be a channel from one
    guest to the next, and a write to the host's disk that no write permission covers."""
    token = "pydeno-stored-" + secrets.token_hex(12)
    settings = {"key": "pydeno-escape-" + secrets.token_hex(8), "token": token}
    with open_runtime(mode) as rt:
        stored = rt.eval(PRELUDE + f"const __cfg = {json.dumps(settings)};\n" + STORE_PROGRAM)
    assert isinstance(stored, dict), stored  # storing alone is fine: it must not outlive the runtime
    later = run_guest(mode, guest_program(RETRIEVE_ATTEMPTS, settings, in_worker=False, postlude=FORGET_POSTLUDE))
    assert_blocked(later.outcomes)
    assert_never_mentions(later, token)
