"""The code stays clean: ruff, mypy --strict, and deno's own checker and linter on the worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pydeno.host.process.staging import find_deno

# Real workers by the hundred: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "ruff", "check", "pydeno", "tests", "benchmarks", "scripts", "examples"],
        [sys.executable, "-m", "ruff", "format", "--check", "pydeno", "tests", "benchmarks", "scripts", "examples"],
        [sys.executable, "-m", "mypy"],
        [find_deno(), "check", "--quiet", "--no-config", "worker/main.ts", "worker/join.ts"],
        [find_deno(), "lint", "--quiet", "--no-config", "worker"],
    ],
    ids=["ruff-check", "ruff-format", "mypy", "deno-check", "deno-lint"],
)
def test_the_code_passes(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
