"""The wheel carries the worker: a non-editable install runs without the source tree."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pydeno
from pydeno import _version

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.slow
def test_the_wheel_contains_the_worker_program(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    worker = {
        f"pydeno/_worker/{name}"
        for name in ("main.ts", "codec.ts", "protocol.ts", "typescript.ts", "modules.ts", "intrinsics.ts")
    }
    assert worker | {"pydeno/__init__.py", "pydeno/host/wire/protocol.py"} <= names


@pytest.mark.slow
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


# -- a new user's machine: a fresh venv, a plain install, the quickstart as written ------


@pytest.fixture(scope="module")
def user_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with a plain install of the wheel and its dependencies
    (no extras, no contributor tools), as the quickstart has a user make."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv


def _quickstart_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "quickstart.md").read_text(), re.S)


@pytest.mark.slow
def test_a_plain_install_has_no_contributor_tools(user_venv: Path) -> None:
    listed = subprocess.run(
        [str(user_venv / "bin" / "pip"), "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout.lower()
    assert "pydeno==" in listed and "deno==" in listed
    assert not {"pytest", "mypy", "ruff", "mkdocs", "ray", "mcp"} & {line.split("==")[0] for line in listed.split()}


@pytest.mark.slow
def test_every_quickstart_script_runs_in_a_fresh_venv_and_prints_what_it_says(user_venv: Path, tmp_path: Path) -> None:
    blocks = _quickstart_blocks()
    assert len(blocks) >= 4
    for number, code in enumerate(blocks, 1):
        script = tmp_path / f"quickstart_{number}.py"
        script.write_text(code)
        run = subprocess.run(
            [str(user_venv / "bin" / "python"), str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 0, (number, run.stderr)
        printed = run.stdout.splitlines()
        for line in re.findall(r"print\([^\n]*\n\s*# (.*)", code):
            assert line in printed, (number, line, printed)


@pytest.mark.slow
def test_doctor_in_a_fresh_venv_names_this_project_its_version_and_where_it_is(user_venv: Path) -> None:
    run = subprocess.run(
        [str(user_venv / "bin" / "pydeno"), "doctor"], capture_output=True, text=True, timeout=120, check=False
    )
    first = run.stdout.splitlines()[0]
    assert first.startswith(f"pydeno: supervised Deno worker processes, version {pydeno.__version__}, in ")
    assert str(user_venv) in first
    assert "warning" not in run.stdout


def test_doctor_warns_when_the_installed_metadata_is_another_version() -> None:
    facts = {**_version.about(), "installed_metadata": "0.13.2"}
    warning = _version.mixed_install(facts)
    assert warning is not None and "pydeno 0.13.2" in warning and "fresh venv" in warning
    assert _version.mixed_install({**facts, "installed_metadata": _version.__version__}) is None
    assert _version.mixed_install({**facts, "installed_metadata": ""}) is None


_USER_FILE = """
import pydeno

def double(code: str) -> object:
    with pydeno.Runtime(timeout=5.0, max_memory=256 * 2**20) as rt:
        return rt.eval(code)

info: pydeno.ErrorInfo = pydeno.classify_error(RuntimeError("x"))
retry: bool = info.retryable
"""


@pytest.mark.slow
def test_a_users_file_type_checks_under_mypy_strict_against_the_installed_wheel(
    user_venv: Path, tmp_path: Path
) -> None:
    good = tmp_path / "good.py"
    good.write_text(_USER_FILE)
    # A wrong use must be reported: proof that mypy read pydeno's own types, not Any.
    bad = tmp_path / "bad.py"
    bad.write_text(_USER_FILE + "\nwrong: int = pydeno.classify_error(RuntimeError('x')).kind\n")
    mypy = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        "--python-executable",
        str(user_venv / "bin" / "python"),
    ]
    ok = subprocess.run([*mypy, str(good)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout
    wrong = subprocess.run([*mypy, str(bad)], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert wrong.returncode == 1
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in wrong.stdout


def test_the_readme_gives_a_plain_install_that_runs_an_eval_and_a_contributor_command_that_runs_the_tests() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        readme_commands = importlib.import_module("readme_commands")
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    install, tests = readme_commands.setup_commands((ROOT / "README.md").read_text())
    assert "pip install . &&" in install and "[dev]" not in install and ".eval(" in install
    assert "pip install -e '.[dev]'" in tests and tests.endswith("python -m pytest -q")
    # CI follows exactly these two commands.
    assert "scripts/readme_commands.py" in (ROOT / ".ci" / "run").read_text()
