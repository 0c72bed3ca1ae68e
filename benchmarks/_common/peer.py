"""The reference peer (PyPI ``pydeno==0.13.2``, the same import name as ours): its venv, made
once when no ``--peer-python`` is given."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PEER_VERSION = "0.13.2"
DEFAULT_PEER_VENV = Path(__file__).resolve().parent.parent / ".peer-venv"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _installed_version(python: Path, package: str) -> str | None:
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    proc = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_peer_venv(venv: Path) -> Path:
    """The peer's interpreter, creating the venv and installing the peer only if missing."""
    python = _venv_python(venv)
    if not python.exists():
        print(f"creating the peer venv at {venv} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if _installed_version(python, "pydeno") != PEER_VERSION:
        print(f"installing pydeno=={PEER_VERSION} into {venv} ...", file=sys.stderr, flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"pydeno=={PEER_VERSION}"],
            check=True,
        )
    return python


def peer_interpreter(args: argparse.Namespace) -> str | None:
    """The peer's interpreter for this run: --peer-python, else benchmarks/.peer-venv (made
    the first time); None with --skip-peer. Exits with 2 if --peer-python does not exist."""
    if args.skip_peer:
        return None
    if args.peer_python and not args.peer_python.is_file():
        print(f"error: --peer-python {args.peer_python} does not exist", file=sys.stderr)
        raise SystemExit(2)
    # Absolute, but not resolved: the sides run from another working directory, and a
    # venv's python is a link the venv is found through.
    return str(args.peer_python.absolute()) if args.peer_python else str(ensure_peer_venv(DEFAULT_PEER_VENV))


def warn_unless_peer_version(version: str | None) -> None:
    if version not in (None, PEER_VERSION):
        print(f"warning: the peer is pydeno {version}, not {PEER_VERSION}", file=sys.stderr)
