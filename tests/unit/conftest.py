"""tests/unit/ needs no deno: a test here that starts a worker fails, so that the folder can be
run where deno cannot, and a test that came to need a worker is moved to where workers run."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pydeno.host.process.child import Child


@pytest.fixture(autouse=True)
def no_worker(launch: Callable[..., None]) -> None:
    def refuse(*args: object, **kwargs: object) -> Child:
        raise AssertionError("a test in tests/unit/ started a worker: it belongs in tests/runtime/ or tests/features/")

    launch(start=refuse)
