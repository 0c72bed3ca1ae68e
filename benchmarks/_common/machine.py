"""What a run was measured on: the machine, and the versions of ours and deno."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parent.parent.parent


def machine_info() -> dict[str, Any]:
    cpu_model = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        # A busy machine skews everything; recorded so a noisy run can be recognised.
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def our_versions() -> dict[str, Any]:
    versions: dict[str, Any] = {}
    try:
        versions["ours"] = importlib.metadata.version("pydeno")
    except importlib.metadata.PackageNotFoundError:
        versions["ours"] = None
    try:
        try:
            from pydeno.host.process.staging import find_deno
        except ImportError:  # an older layout
            try:
                from pydeno.host._staging import find_deno  # type: ignore[import-not-found, no-redef]
            except ImportError:  # older still
                from pydeno.host._process import find_deno  # type: ignore[import-not-found, no-redef]

        deno = find_deno()
        out = subprocess.run([deno, "--version"], capture_output=True, text=True, check=True, timeout=30).stdout
        versions["deno"] = out.splitlines()[0].strip() if out else None
        versions["deno_full"] = out.strip()
        versions["deno_path"] = deno
    except (ImportError, OSError, subprocess.SubprocessError) as exc:
        versions["deno"] = f"unavailable: {exc}"
    git = subprocess.run(
        ["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    if git.returncode == 0:
        versions["ours_git"] = git.stdout.strip()
    return versions


def print_header(machine: dict[str, Any], versions: dict[str, Any]) -> None:
    """The first lines of a side-by-side run: the machine, and which pydeno and deno are ours."""
    print(
        f"machine: {machine['cpu_count']} CPUs ({machine.get('cpu_model')}), {machine['platform']}, "
        f"python {machine['python']}, load {machine.get('loadavg_at_start')}"
    )
    print(f"ours: pydeno {versions.get('ours')} ({versions.get('ours_git', '?')}), deno: {versions.get('deno')}")
