"""A guest with an HttpFetch attached, and the secret the fetch tests inject, shared by the tests
against a real server (tests/features/test_fetch.py) and a hostile one
(tests/hostile/test_fetch_hostile_server.py)."""

from __future__ import annotations

import json
from typing import Any

import pydeno

SECRET = "Bearer s3cret-token-0123456789"


def guest(fetch: pydeno.HttpFetch, code: str) -> Any:
    """Run code (the body of an async function) in a runtime with fetch attached."""
    with pydeno.Runtime() as rt:
        fetch.attach(rt)
        return rt.eval(f"(async () => {{ {code} }})()")


def refusal(fetch: pydeno.HttpFetch, url: str, init: str = "{}") -> list[str]:
    """[name, message] of the error the guest's fetch(url, init) throws."""
    got: list[str] = guest(
        fetch,
        f"try {{ await fetch({json.dumps(url)}, {init}); return ['no error']; }} "
        "catch (e) { return [e.name, e.message]; }",
    )
    return got
