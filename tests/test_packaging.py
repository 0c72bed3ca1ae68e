"""The wheel carries the worker: a non-editable install runs without the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("pydeno-*.whl")
    return built


def test_the_wheel_contains_the_worker_program(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    worker = {
        f"pydeno/_worker/{name}"
        for name in ("main.ts", "codec.ts", "protocol.ts", "typescript.ts", "modules.ts", "intrinsics.ts")
    }
    assert worker | {"pydeno/__init__.py", "pydeno/host/_protocol.py"} <= names


def test_an_installed_wheel_evaluates_without_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
    )
    script = "import pydeno; print(pydeno.__file__); print(pydeno.Runtime().eval('[1, 2].map(x => x * 3)'))"
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    location, value = result.stdout.strip().split("\n")
    assert location.startswith(str(site))
    assert value == "[3, 6]"
