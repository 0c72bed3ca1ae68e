"""Where the guest's console output goes: to the ``pydeno.console`` logger once logging is
configured, to stderr while it is not (so a newcomer's first ``console.log`` is seen), or
wherever ``on_console`` says: ``"print"`` (log/info/debug to stdout, warn/error to stderr,
as Deno and Node do), ``"stderr"``, ``"log"`` or a callable."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pydeno

# Real workers: outside the fast subset (pytest -m "not slow").
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LINES = "console.log('a log line'); console.warn('a warning'); console.error('an error'); console.debug('a debug line')"


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_without_logging_configured_console_output_is_written_to_stderr() -> None:
    done = run_python(f"""
        import pydeno
        with pydeno.Runtime() as rt:
            rt.eval({LINES!r})
        print("done")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert done.stderr.splitlines() == ["a log line", "a warning", "an error", "a debug line"]


def test_once_logging_is_configured_console_output_is_the_pydeno_console_loggers() -> None:
    done = run_python(f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
        import pydeno
        with pydeno.Runtime() as rt:
            rt.eval({LINES!r})
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "pydeno.console INFO a log line",
        "pydeno.console WARNING a warning",
        "pydeno.console ERROR an error",
    ]
    assert "a log line" not in done.stderr


def test_print_writes_log_info_and_debug_to_stdout_and_warn_and_error_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pydeno.Runtime(on_console="print") as rt:
        rt.eval(LINES)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["a log line", "a debug line"]
    assert err.splitlines() == ["a warning", "an error"]


def test_stderr_writes_every_line_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with pydeno.Runtime(on_console="stderr") as rt:
        rt.eval(LINES)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["a log line", "a warning", "an error", "a debug line"]


def test_log_always_uses_the_logger_and_never_writes_a_stream(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with pydeno.Runtime(on_console="log") as rt, caplog.at_level(logging.DEBUG, logger="pydeno.console"):
        rt.eval(LINES)
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "pydeno.console"]
    assert records == [
        ("INFO", "a log line"),
        ("WARNING", "a warning"),
        ("ERROR", "an error"),
        ("DEBUG", "a debug line"),
    ]
    out, err = capsys.readouterr()
    assert out == "" and "a log line" not in err


def test_log_with_logging_unconfigured_writes_nothing_python_would_not() -> None:
    done = run_python("""
        import pydeno
        with pydeno.Runtime(on_console="log") as rt:
            rt.eval("console.log('kept quiet')")
    """)
    assert done.returncode == 0, done.stderr
    assert "kept quiet" not in done.stdout + done.stderr


@pytest.mark.parametrize("bad", ["stdrr", "", "PRINT", 3, b"stderr"])
def test_an_unknown_console_destination_is_refused_naming_the_choices(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        pydeno.Runtime(on_console=bad)  # type: ignore[arg-type]
    message = str(info.value)
    assert "on_console must be a callable (level, text), 'print', 'stderr', 'log' or None" in message
    if bad == "stdrr":
        assert "did you mean 'stderr'?" in message


def test_code_mode_keeps_console_in_the_result_and_also_sends_it_where_on_console_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pydeno.CodeMode(tools=[], on_console="stderr") as cm:
        result = cm.execute("console.log('from the program'); 1")
    assert result.stdout == "from the program"
    assert capsys.readouterr().err == "from the program\n"
    with pytest.raises(ValueError, match="on_console must be"):
        pydeno.CodeMode(tools=[], on_console="nowhere")  # type: ignore[arg-type]
