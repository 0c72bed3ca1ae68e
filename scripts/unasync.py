#!/usr/bin/env python3
"""Generate the sync drivers from their async source, so the twins cannot drift.

The folder rule: each ``pydeno/**/_async.py`` is the one source of a driver, and the
``_sync.py`` beside it is generated from it here, by rewriting ``async``/``await`` away and
the async names to the sync ones (``AsyncRuntime`` -> ``Runtime``; in module paths ``._async``
-> ``._sync`` and ``backends.anyio`` -> ``backends.sync``). Whatever else differs lives in
``pydeno/_runtime/backends/``. A line ``# unasync: <code>`` in the source is ``<code>`` in the
sync twin (a step only the blocking flavour takes); a line that ends in ``# async-only`` is
left out of it (a step only the async flavour takes, such as letting other tasks run).

    python scripts/unasync.py           # rewrite the sync twins
    python scripts/unasync.py --check   # exit 1, naming them, if any is stale

tests/meta/test_twins.py runs the check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

# The generators' shared command line, beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _generated

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGE: Final = ROOT / "pydeno"
SOURCE: Final = "_async.py"
TARGET: Final = "_sync.py"


def sources() -> list[str]:
    """Every driver source, as a path under pydeno/: found by the folder rule, never listed."""
    return sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob(SOURCE))


# Whole words, longest first where one contains another.
NAMES: Final = {
    "AsyncAgentSandbox": "AgentSandbox",
    "AsyncCodeMode": "CodeMode",
    "AsyncSandboxPool": "SandboxPool",
    "AsyncSessionPool": "SessionPool",
    "AsyncRuntime": "Runtime",
    "AsyncSteps": "Steps",
    "run_with_retry_async": "run_with_retry",
    # The mixin whose __enter__ says "use async with" becomes the one whose __aenter__ says
    # "use with": the twin's own __aenter__ is renamed __enter__ below.
    "NeedsAsyncWith": "NeedsWith",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "AsyncIterator": "Iterator",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "asynccontextmanager": "contextmanager",
}
_WORDS: Final = re.compile(r"\b(" + "|".join(map(re.escape, NAMES)) + r")\b")
# Module paths: another driver's source is its twin (``from .._runtime._async import ...``), and
# the way the async flavour waits is the blocking one (``from .backends import anyio as backend``).
_MODULES: Final = (
    (re.compile(r"(?<=\.)_async\b"), "_sync"),
    (re.compile(r"\bbackends(\.| import )anyio\b"), r"backends\1sync"),
)
_KEYWORDS: Final = re.compile(r"\b(?:async (?=def |with |for )|await )")
# What an awaitable gives is what the blocking call returns.
_AWAITABLE: Final = re.compile(r"\bAwaitable\[([^\[\]]+)\]")
_SYNC_ONLY: Final = re.compile(r"^(\s*)# unasync: (.*)$", re.MULTILINE)
_ASYNC_ONLY: Final = re.compile(r"^.*  # async-only\n", re.MULTILINE)
_DOCSTRING: Final = re.compile(r'\A"""(.*?)"""\n', re.DOTALL)


def target_of(source: str) -> str:
    """The twin of a source path under pydeno/: ``_runtime/_async.py`` -> ``_runtime/_sync.py``."""
    folder, _, name = source.rpartition("/")
    if name != SOURCE:
        raise ValueError(f"{source}: a driver's source is a {SOURCE} in a folder of its own")
    return f"{folder}/{TARGET}"


def unasync(text: str, source: str) -> str:
    """The sync twin of the async source text (before formatting)."""
    found = _DOCSTRING.match(text)
    if found is None:
        raise ValueError(f"{source} must open with a module docstring")
    # The module docstring is kept as written (it speaks of both twins), under a notice.
    notice = f"Generated from pydeno/{source} by scripts/unasync.py: edit that file, not this one.\n\n"
    body = text[found.end() :]
    body = _SYNC_ONLY.sub(r"\1\2", body)
    body = _ASYNC_ONLY.sub("", body)
    body = _KEYWORDS.sub("", body)
    body = _AWAITABLE.sub(r"\1", body)
    body = _WORDS.sub(lambda m: NAMES[m.group(1)], body)
    for pattern, replacement in _MODULES:
        body = pattern.sub(replacement, body)
    return f'"""{notice}{found.group(1)}"""\n{body}'


def formatted(text: str, path: Path) -> str:
    """text as the project's tools leave it: imports sorted (renamed ones may sort elsewhere),
    none that only the async flavour used, nested ``with`` blocks that became one joined,
    then formatted; so the twins pass the same checks as their source."""
    for step in (["check", "--select", "I,F401,SIM117", "--fix", "--quiet"], ["format"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *step, "--stdin-filename", str(path), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def generated() -> dict[Path, str]:
    twins = {}
    for source in sources():
        target = PACKAGE / target_of(source)
        twins[target] = formatted(unasync((PACKAGE / source).read_text(encoding="utf-8"), source), target)
    return twins


def stale() -> list[Path]:
    return [path for path, text in generated().items() if not path.exists() or path.read_text(encoding="utf-8") != text]


def write() -> None:
    for path, text in generated().items():
        path.write_text(text, encoding="utf-8")


def main() -> int:
    return _generated.main(
        __doc__.splitlines()[0],
        lambda: [f"stale: {path.relative_to(ROOT)} (run python scripts/unasync.py)" for path in stale()],
        write,
    )


if __name__ == "__main__":
    sys.exit(main())
