"""deno's type checker on a guest program and the declarations of its API, in a process
confined like a worker.

``check(declarations, program, sandbox=..., timeout=...)`` writes the two files into a
private directory, runs ``deno check`` on them (behind the launcher's layers unless
``sandbox="off"``: the checker reads the guest's code, and the TypeScript compiler is a
large program), and returns the diagnostics it reported about the program. Parsing deno's
report is :func:`diagnostics`, a pure function.

npm packages' own declarations come as ``files`` (written under the directory, as
``types/<name>/<version>/...``) and ``imports`` (an import map: the specifier a program
imports -> its entry file there), so that everything the checker reads is a local file:
it runs with no remote imports and no npm resolution.
"""

from __future__ import annotations

import json
import marshal
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from ..wire.protocol import EXIT_UNAVAILABLE
from . import platform
from .spec import DENO_ARGV0, LAUNCHER, launcher_command
from .staging import runnable_deno

__all__ = ["CheckFailed", "Diagnostic", "check", "diagnostics"]

PROGRAM: Final = "program.ts"
DECLARATIONS: Final = "tools.d.ts"
CONFIG: Final = "deno.json"
TYPES: Final = "types"
# What the compiler may use of the heap: its own size, not the guest's max_memory.
_HEAP_MIB: Final = 1024

_HEAD: Final = re.compile(r"^(TS\d+) \[ERROR\]: (.*)$")
_AT: Final = re.compile(
    r"^\s+at file://.*?/("
    + re.escape(PROGRAM)
    + "|"
    + re.escape(DECLARATIONS)
    + "|"
    + re.escape(TYPES)
    + r"/.+?):(\d+):(\d+)$"
)


class CheckFailed(Exception):
    """The checker itself did not run to an answer (could not start, was refused its sandbox,
    or ran past its time)."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One type error: deno's code for it, its message, and where (in the program, or in
    the declarations when ``file`` says so), with the lines deno showed under it."""

    code: str
    message: str
    file: str
    line: int
    column: int
    excerpt: tuple[str, ...]

    def text(self) -> str:
        where = "" if self.file == PROGRAM else f" in {self.file}"
        head = f"{self.code}: {self.message} (line {self.line}, column {self.column}{where})"
        return "\n".join([head, *(f"  {line}" for line in self.excerpt)])


def diagnostics(report: str) -> list[Diagnostic]:
    """The diagnostics in deno check's report (its stderr, without colour)."""
    found: list[Diagnostic] = []
    lines = report.splitlines()
    i = 0
    while i < len(lines):
        head = _HEAD.match(lines[i])
        if head is None:
            i += 1
            continue
        message = [head.group(2)]
        excerpt: list[str] = []
        i += 1
        at = None
        while i < len(lines):
            at = _AT.match(lines[i])
            if at is not None or _HEAD.match(lines[i]):
                break
            excerpt.append(lines[i])
            i += 1
        if at is None:
            found.append(Diagnostic(head.group(1), " ".join(message), PROGRAM, 0, 0, tuple(excerpt)))
            continue
        found.append(
            Diagnostic(
                head.group(1), " ".join(message), at.group(1), int(at.group(2)), int(at.group(3)), tuple(excerpt)
            )
        )
        i += 1
    return found


def check(
    declarations: str,
    program: str,
    *,
    sandbox: str,
    timeout: float,
    files: Mapping[str, str] | None = None,
    imports: Mapping[str, str] | None = None,
) -> list[Diagnostic]:
    """The type errors of program against declarations (empty: it type-checks), with files
    (paths under ``types/``) and the import map that names them."""
    deno = runnable_deno()
    work = Path(tempfile.mkdtemp(prefix="pydeno-check-"))
    try:
        cache = work / "deno-dir"
        cache.mkdir()
        # The confined checker runs as an unprivileged user: it must be able to read these.
        for path in (work, cache):
            path.chmod(0o755)
        # skipLibCheck: a package's declarations are the package's own, checked by its
        # authors under their settings; what matters is the program's use of them. An
        # import in them of a package that was not given is then any, not an error.
        mapped = dict(imports or {})
        for specifier, entry in mapped.items():
            if entry.removeprefix("./") not in (files or {}):
                raise CheckFailed(f"the import map sends {specifier!r} to {entry!r}, which is not one of the files")
        config = {"imports": mapped, "compilerOptions": {"skipLibCheck": True}}
        written = [
            (DECLARATIONS, declarations),
            (PROGRAM, program + "\nexport {};\n"),
            (CONFIG, json.dumps(config)),
            *(_under_types(path, text) for path, text in (files or {}).items()),
        ]
        for name, text in written:
            target = work / name
            for folder in reversed(target.parents):
                if folder.is_relative_to(work) and not folder.exists():
                    folder.mkdir()
                    folder.chmod(0o755)
            target.write_text(text, encoding="utf-8")
            target.chmod(0o644)
        argv = [
            deno,
            "check",
            f"--config={work / CONFIG}",
            "--no-lock",
            "--no-remote",
            "--no-npm",
            "--quiet",
            f"--v8-flags=--max-old-space-size={_HEAP_MIB}",
            str(work / DECLARATIONS),
            str(work / PROGRAM),
        ]
        env = {"DENO_DIR": str(cache), "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1"}
        if sandbox == "off":
            command, environment = argv, env
        else:
            spec = {
                "parent": os.getpid(),
                "mode": sandbox,
                "read": [*platform.library_dirs(), str(work)],
                "execute": [deno, platform.elf_interpreter()],
                "env": env,
                "memory_cap": None,
                "thread_cap": None,
                "argv": argv,
                "argv0": DENO_ARGV0,
                "files": None,
                "simulate": {},
                "silent": [],
            }
            command, environment = launcher_command(LAUNCHER, marshal.dumps(spec).hex()), {}
        try:
            done = subprocess.run(
                command, env=environment, capture_output=True, text=True, timeout=timeout, check=False, cwd=work
            )
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"the type check ran past timeout={timeout}s and was killed") from None
        except OSError as exc:
            raise CheckFailed(f"the type checker could not start: {exc.strerror}") from None
        if done.returncode == EXIT_UNAVAILABLE:
            reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no reason given"
            raise CheckFailed(f"the type checker's sandbox is unavailable: {reason}")
        # A message that names a file names it as the program does: a package's entry by the
        # specifier the program imports, any other file by its path in the directory (not by
        # where this process happened to make the directory).
        names = [(f"file://{work}/", "")]
        names += [(f'"{path.removeprefix("./")}"', f'"{specifier}"') for specifier, path in (imports or {}).items()]
        found = [
            replace(d, message=_renamed(d.message, names), excerpt=tuple(_renamed(e, names) for e in d.excerpt))
            for d in diagnostics(done.stderr)
        ]
        if done.returncode == 0:
            return []
        if not found:
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
            raise CheckFailed(f"the type checker failed: {last.replace(str(work), '.')}")
        return found
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _renamed(text: str, names: list[tuple[str, str]]) -> str:
    for old, new in names:
        text = text.replace(old, new)
    return text


def _under_types(path: str, text: str) -> tuple[str, str]:
    """path and text, when path is a relative path below ``types/`` that stays there."""
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != TYPES or any(part in ("", ".", "..") or "\\" in part for part in parts):
        raise CheckFailed(f"the declaration file {path!r} is not a path below {TYPES}/")
    return path, text
