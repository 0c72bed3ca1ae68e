"""The command line: the ``pydeno`` console script and ``python -m pydeno``.

::

    pydeno [--lang ts] [--timeout S] [--max-memory SIZE] [--sandbox MODE] [--json] CODE
    pydeno [options] -          # the code is all of stdin (UTF-8)
    pydeno doctor [--json]      # which OS sandbox layers a worker gets here
    pydeno errors [KIND] [--json]
    pydeno mcp [--http [--host H] [--port N] [--allow-host NAME]]
               [--session [--idle-timeout S] [--max-sessions N]] [--pool-size N]
               [--timeout S] [--max-memory SIZE] [--cpu-limit S] [--sandbox MODE] [--max-code-bytes N]
               [--max-workers N] [--max-queued N] [--max-message-bytes SIZE] [--max-result-bytes SIZE]

Evaluating code
---------------
``pydeno CODE`` starts one worker, evaluates CODE (a returned promise is awaited), prints
the value as one line of JSON on stdout and exits. Exit codes:

* 0: the value, as JSON, on stdout; nothing else is written anywhere.
* 1: the guest threw or failed to compile (kind ``js_error``): ``str(exc)`` (``Evaluation
  failed: TypeError: ...``) and the stack's ``at ...`` frames on stderr, nothing on stdout.
  Code that did not compile ends its first line with ``(line L, column C)`` and shows the
  line with a caret under the place; JavaScript that is TypeScript says to pass ``--lang ts``.
* 2: anything else (a limit, a crash, no sandbox, no deno, undecodable stdin): on stderr
  ``pydeno: <exception type>: <message>``, then the exception's own note (``Kind:`` with
  whether a retry can help, ``Fix:`` its ``.hint``), ``Option:`` the command-line option
  that raises the limit where there is one, and ``Docs:`` where its page is read (the
  command that prints it, ``pydeno errors <kind>``, and the docs site's page when the
  package names a site). Nothing on stdout. A bad option exits 2 as well.
* 130: interrupted (Ctrl-C); the worker is killed.

Nothing is printed while the code runs, so stdout stays pipeable: the guest's console
output goes to stderr (as the text only, one line per call), and so do Python warnings and
log records. Options are validated before any worker starts; a bad value is an argparse
error (exit 2, usage on stderr).

* ``--lang {js,ts}``: the code's language, as ``lang=`` takes it (``javascript`` and
  ``typescript`` too, in any case; default ``js``): TypeScript has its types stripped.
* ``--timeout S``: seconds the eval may take (a positive float; default: the runtime's 30).
* ``--max-memory SIZE``: bytes (``268435456``), or a number with ``K``, ``M`` or ``G``
  (or ``KB``/``KiB``, ``MB``/``MiB``, ``GB``/``GiB``; case-insensitive; all powers of 1024):
  ``256M``, ``1.5G``, as ``max_memory=`` takes it. A size that is not a whole number of bytes
  (``1.3M``) is refused, never rounded. At least 32M (the runtime's minimum); default 512M.
* ``--sandbox {require,best_effort,off}``: the runtime's ``sandbox=`` (default ``require``).
* ``--json``: the outcome as one JSON object on stdout, with the same exit codes:
  ``{"ok": true, "value": V}`` or ``{"ok": false, "error": E, "classification":
  classify_error(exc).to_dict(), "hint": ..., "docs": "pydeno errors <kind>" (``exc.docs``),
  "option": "--timeout" | null}``. ``E`` is ``{"type": <exception class>, "message":
  str(exc)}``; for a JavaScriptError ``message`` is the guest's own ``.message`` and ``E``
  adds ``"name"`` and ``"stack"`` (the JavaScript error object's three fields), and
  ``"line"`` and ``"column"`` (where code did not compile, else null).

Subcommands are recognised only as the first argument (``pydeno doctor``, ``pydeno errors``,
``pydeno mcp``), so they and a positional CODE share one command line. Code that is literally
``doctor``, ``errors`` or ``mcp``, or that starts with ``-``, goes through stdin
(``echo doctor | pydeno -``) or after ``--`` (``pydeno -- -1``).

Values as JSON
--------------
The value prints in the one JSON dialect pydeno uses for values outside Python, the same as
Code Mode's ``ExecutionResult.to_dict()`` and the MCP server (pydeno/_runtime/json_values.py;
docs/values.md, "Values as JSON", lists every tag). A value JSON can hold prints as itself
(object keys in the guest's order; integers of any size, BigInts included, as exact digits);
anything else is an object tagged ``"$type"``: ``{"$type": "bytes", "base64": ...}``,
``{"$type": "undefined"}``, ``{"$type": "date", "iso": ...}`` and so on. Earlier, the CLI
wrote a dialect of its own (``{"$bytes": ...}``, ``null`` for undefined and NaN, a Date as a
bare string, a Set as an array, ``"<function>"``, ``{"$error": ...}``, a Map's other keys as
strings); it writes this one now. The JSON is UTF-8 whatever the locale.

``pydeno errors``
-----------------
``pydeno errors`` prints the kind table (kind, retryable, larger limits, summary) from the
catalog (:data:`pydeno._base.kinds.Catalog`); ``pydeno errors KIND`` prints that kind's page,
the same text as the docs' ``errors/KIND.md`` (which scripts/gen_error_docs.py generates from the
same catalog) without its generated-file comment. An unknown kind exits 2, naming the nearest
kinds (``did you mean 'timeout'?``) and listing them all. ``--json`` prints the rows (or the one row) as JSON instead.

``pydeno doctor``
-----------------
Starts one real worker with every OS layer this system allows and prints one line per
protection (applied, missing, not applicable) with the reason, then whether
``sandbox="require"`` would start here. It exits 0 when it would, 1 when it would refuse.
``--json`` prints the report as JSON.

``pydeno mcp``
--------------
An MCP server with one tool, ``run_javascript`` ``{code, timeout?}``, whose result is an
:class:`~pydeno.ExecutionResult` (pydeno/_cli/mcp_server.py; docs/mcp.md). It serves over stdio
until stdin closes, or with ``--http`` over streamable HTTP at ``http://HOST:PORT/mcp``
(``--host`` default ``127.0.0.1``, ``--port`` default 8765, 0 for any free port; the address
is printed on stderr once it listens). Without ``--session`` every call runs on a fresh worker
from a pool of ``--pool-size`` warm ones (default 2); with it each MCP session keeps one
runtime (its first worker a warm one from the pool), so top-level declarations persist,
closed after ``--idle-timeout`` seconds without a call (default 120) or when the session ends;
past ``--max-sessions`` (default 16) the least recently used idle session gives way, and with
every session busy a new one gets a retryable error result. At most ``--max-workers`` workers
(default 16) are alive and ``--max-queued`` calls (default 32) wait; a call past both gets a
retryable error result at once, and over HTTP one MCP session may hold half of each. A message
over ``--max-message-bytes`` (default 4M) is discarded and answered with a JSON-RPC error; a
result is cut to ``--max-result-bytes`` (default 1M), text and structured content together.
``--timeout``, ``--max-memory``, ``--sandbox`` are as for code, ``--cpu-limit S`` caps the CPU
seconds of one call, and a call's own ``timeout`` may only lower ``--timeout``. A program over
``--max-code-bytes`` (UTF-8, default 100000) is refused as an error result. SIGINT, SIGTERM
and the end of stdin stop it (exit 0) after every worker is closed; without the ``mcp`` extra
it exits 2 saying how to install it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, cast

from .._base import checks
from .._base.docs_links import docs_page, note_for
from .._base.errors import JavaScriptError, PydenoError
from .._base.kinds import Catalog, classify_error
from .._base.options import SANDBOX_MODES, RuntimeKwargs, RuntimeOptions
from .._runtime._sync import Runtime
from .._runtime.json_values import jsonable
from .._runtime.sandbox_status import sandbox_status
from .._runtime.syntax import place_text, placed, top_level_return
from .._version import PROJECT, __version__, about, extra_missing, mixed_install
from .pages import error_row, error_table, kind_page, nearest_kinds

__all__ = ["main", "parse_size"]

EXIT_OK: Final = 0
EXIT_JS_ERROR: Final = 1
EXIT_FAILURE: Final = 2
EXIT_INTERRUPTED: Final = 130

# The command-line option that raises the limit behind a kind, where there is one.
OPTIONS: Final[dict[str, str]] = {
    "timeout": "--timeout",
    "memory_limit": "--max-memory",
    "sandbox_unavailable": "--sandbox",
    "limits_unmeasurable": "--sandbox",
}

# -- values as JSON --------------------------------------------------------------------


def _write_json(value: Any, *, indent: int | None = None) -> None:
    """One JSON document and a newline on stdout, as UTF-8 whatever the locale."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent) + "\n"
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.write(text)
        stream.flush()
        return
    stream.flush()
    # Lone surrogates cannot come back from an eval; if one did, it is written as the
    # JSON escape it stands for instead of failing.
    buffer.write(text.encode("utf-8", "backslashreplace"))
    buffer.flush()


# -- option values ---------------------------------------------------------------------

SIZE_FORMS: Final = (
    "bytes (268435456) or a number with K, M or G (or KB/KiB, MB/MiB, GB/GiB), all powers of 1024 (256M, 1.5G, 512MiB)"
)


def parse_size(text: str) -> int:
    """``--max-memory``'s value in bytes, read as ``max_memory=`` reads a str
    (:func:`pydeno._base.checks.parse_size`): ``268435456``, ``256M``, ``1.5G``, ``512MiB``."""
    try:
        return checks.parse_size(text)
    except checks.SizeError as exc:
        problem = f"give {SIZE_FORMS}" if exc.exact is None else exc.explain().removeprefix("is ")
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: {problem}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"invalid timeout {text!r}: give a positive number of seconds (0.5, 30)")
    return value


# -- pydeno CODE -----------------------------------------------------------------------

_EVAL_EPILOG = """\
commands:
  pydeno doctor [--json]         report the OS sandbox layers in force on this machine
  pydeno errors [KIND] [--json]  the error-kind table, or one kind's page
  pydeno mcp [options]           an MCP server with a run_javascript tool (pydeno mcp --help)

exit codes:
  0  the value, as one line of JSON, on stdout
  1  the JavaScript threw or failed to compile: the error on stderr
  2  any other failure: its kind, hint and docs page on stderr (or a bad argument)

Values JSON cannot hold come as objects tagged "$type": {"$type": "bytes",
"base64": ...}, {"$type": "undefined"}, {"$type": "date", "iso": ...}, ... (docs/values.md).
The guest's console output goes to stderr. Code that starts with "-" or is literally
"doctor", "errors" or "mcp" goes through stdin ("pydeno -") or after "--".
"""


_FLAGS: Final = {
    "timeout": "--timeout",
    "max_memory": "--max-memory",
    "sandbox": "--sandbox",
    "cpu_limit": "--cpu-limit",
}


def _eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pydeno",
        description="Run untrusted JavaScript in a sandboxed Deno worker and print its value as JSON.",
        epilog=_EVAL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "code", metavar="CODE", help='JavaScript (or TypeScript, with --lang ts) to evaluate, or "-" to read stdin'
    )
    parser.add_argument("--lang", type=_lang, default="js", metavar="{js,ts}", help="the code's language (default js)")
    # Another project is named pydeno on PyPI: the version line says which one this is.
    parser.add_argument("--version", action="version", version=f"{PROJECT}, version {__version__}")
    parser.add_argument("--timeout", type=_seconds, metavar="SECONDS", help="seconds the eval may take (default 30)")
    parser.add_argument(
        "--max-memory", type=parse_size, metavar="SIZE", help=f"the worker's memory cap: {SIZE_FORMS}; default 512M"
    )
    parser.add_argument(
        "--sandbox",
        choices=SANDBOX_MODES,
        help="OS sandbox: require every layer (default), best_effort, or off",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as one JSON object on stdout")
    return parser


def _lang(text: str) -> str:
    try:
        checks.is_typescript(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _console(level: str, text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _hint(exc: BaseException, kind: str) -> str:
    hint = getattr(exc, "hint", None) if isinstance(exc, PydenoError) else None
    return hint if isinstance(hint, str) and hint else Catalog[kind].fix


def _error_object(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, JavaScriptError):
        return {
            "type": type(exc).__name__,
            "message": exc.message,
            "name": exc.name,
            "stack": exc.stack,
            "line": exc.line,
            "column": exc.column,
        }
    return {"type": type(exc).__name__, "message": str(exc)}


def _fail(exc: BaseException, as_json: bool) -> int:
    info = classify_error(exc)
    status = EXIT_JS_ERROR if info.kind == "js_error" else EXIT_FAILURE
    hint = _hint(exc, info.kind)
    if as_json:
        _write_json(
            {
                "ok": False,
                "error": _error_object(exc),
                "classification": info.to_dict(),
                "hint": hint,
                "docs": docs_page(info.kind),
                "option": OPTIONS.get(info.kind),
            }
        )
    elif status == EXIT_JS_ERROR:
        lines = [str(exc)]
        if isinstance(exc, JavaScriptError):
            lines += [line for line in exc.stack.splitlines() if line.lstrip().startswith("at ")]
            found = placed(exc)
            if found is not None:
                # The note's place without its first line, which str(exc) already says.
                text = place_text(
                    found[0], "--lang ts" if found[1] else None, returning=top_level_return(exc, found[0])
                )
                lines += text.splitlines()[1:]
        print("\n".join(lines), file=sys.stderr)
    else:
        # The note every PydenoError carries (Kind, Fix, Docs), with the option that raises
        # the limit before the pointer to the docs page.
        *note, docs = note_for(info, hint).splitlines()
        lines = [f"pydeno: {type(exc).__name__}: {exc}", *note]
        if info.kind in OPTIONS:
            lines.append(f"Option: {OPTIONS[info.kind]}")
        lines.append(docs)
        print("\n".join(lines), file=sys.stderr)
    return status


def _runtime_options(parser: argparse.ArgumentParser, args: argparse.Namespace, names: Sequence[str]) -> RuntimeKwargs:
    """The runtime options the command line gave (of ``names``), checked as the runtime would."""
    options = cast(RuntimeKwargs, {name: getattr(args, name) for name in names if getattr(args, name) is not None})
    _check_options(parser, options)
    return options


def _check_options(parser: argparse.ArgumentParser, options: RuntimeKwargs) -> None:
    """The runtime's own checks (max_memory's minimum), before any worker starts."""
    try:
        RuntimeOptions(**options)
    except (TypeError, ValueError) as exc:
        # The runtime's messages start with the parameter's name: name the option instead.
        message = str(exc)
        flag = next((f for name, f in _FLAGS.items() if message.startswith(f"{name} ")), None)
        parser.error(f"argument {flag}: {message}" if flag else message)


def _evaluate(argv: Sequence[str]) -> int:
    parser = _eval_parser()
    args = parser.parse_args(argv)
    options = _runtime_options(parser, args, ("timeout", "max_memory", "sandbox"))
    try:
        code = sys.stdin.buffer.read().decode("utf-8") if args.code == "-" else args.code
        options["on_console"] = _console
        with Runtime(**options) as rt:
            value = jsonable(rt.eval(code, lang=args.lang))
    except KeyboardInterrupt:
        print("pydeno: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its kind
        return _fail(exc, args.json)
    _write_json({"ok": True, "value": value} if args.json else value)
    return EXIT_OK


# -- pydeno doctor ---------------------------------------------------------------------


def _doctor(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pydeno doctor",
        description="Report the OS sandbox layers a worker gets on this machine. "
        "Exits 0 when sandbox='require' would start here, 1 when it would refuse.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    facts = about()
    status = sandbox_status()
    if args.json:
        print(json.dumps({"pydeno": facts, **status.to_dict()}, indent=2))
    else:
        print(f"{facts['project']}, version {facts['version']}, in {facts['location']}")
        warning = mixed_install(facts)
        if warning:
            print(warning)
        print(status)
    return 0 if status.require_would_start else 1


# -- pydeno errors ---------------------------------------------------------------------


def _errors(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pydeno errors",
        description="Print the error-kind table, or one kind's page (what it means, retry, fix, example).",
    )
    parser.add_argument("kind", nargs="?", metavar="KIND", help="an error kind, as classify_error(exc).kind names it")
    parser.add_argument("--json", action="store_true", help="print the rows (or the one row) as JSON")
    args = parser.parse_args(argv)
    if args.kind is None:
        if args.json:
            _write_json([error_row(kind, full=False) for kind in Catalog], indent=2)
        else:
            print(error_table())
        return EXIT_OK
    if args.kind not in Catalog:
        guess = nearest_kinds(args.kind)
        listed = f"{guess} The kinds are" if guess else "the kinds are"
        parser.error(f"unknown kind {args.kind!r}; {listed}: {', '.join(Catalog)}")
    if args.json:
        _write_json(error_row(args.kind, full=True), indent=2)
    else:
        print(kind_page(args.kind), end="")
    return EXIT_OK


# -- pydeno mcp ------------------------------------------------------------------------

MCP_EXTRA_MISSING: Final = extra_missing("pydeno mcp", "mcp")
_MCP_EPILOG = """\
The tool: run_javascript {code: string, timeout?: seconds}. Its result is the run's
ExecutionResult as structured content (ok, value, stdout, stderr, error with its kind,
tool_calls, duration_s, truncated) and its text form as text content; a failed run is a
result with isError true. A client's configuration: {"mcpServers": {"pydeno":
{"command": "pydeno", "args": ["mcp", "--session"]}}}. Docs: docs/mcp.md.
"""


def _whole(name: str, minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(
                f"invalid {name} {text!r}: give a whole number of at least {minimum}{upper}"
            )
        return value

    return parse


def _host_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"invalid host name {text!r}: give a DNS name such as mcp.example.com")
    return text


def _byte_count(flag: str, minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = parse_size(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be at least {minimum} bytes, got {text!r}")
        return value

    return parse


def _mcp_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pydeno mcp",
        description="Serve an MCP server with one tool, run_javascript, that runs a JavaScript or TypeScript "
        "program in a sandboxed Deno worker. Serves over stdio unless --http is given; stops at the end of "
        "stdin, SIGINT or SIGTERM, after closing every worker.",
        epilog=_MCP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--host", metavar="HOST", help="with --http: the address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=_whole("port", 0, 65535), metavar="N", help="with --http: the port (default 8765; 0: any free)"
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        type=_host_name,
        metavar="NAME",
        help="with --http: a host name (besides IP addresses and localhost) that requests may carry as their Host "
        "and Origin, e.g. the name a reverse proxy serves; repeat for more",
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="keep one runtime per MCP session, so top-level declarations persist from call to call "
        "(default: every call runs on a fresh worker)",
    )
    parser.add_argument(
        "--store",
        metavar="PATH",
        help="with --session: keep the sessions in the SQLite file PATH (created if missing), signed with the key "
        "in PATH.key (made, mode 0600, if missing), so that a session's state comes back after its worker closed "
        "and a server started again on PATH resumes a session whose client presents its id again",
    )
    parser.add_argument(
        "--idle-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="with --session: close a session's worker after this long without a call (default 120)",
    )
    parser.add_argument(
        "--max-sessions",
        type=_whole("number of sessions", 1),
        metavar="N",
        help="with --session: sessions kept at once, each with its own worker; past N the least recently used "
        "idle one gives way, and with none idle a new one is turned away (default 16, at most --max-workers)",
    )
    parser.add_argument(
        "--max-workers",
        type=_whole("number of workers", 1),
        metavar="N",
        help="deno workers alive at once, warm spares and sessions' workers included (default 16); "
        "over HTTP one MCP session may run at most half of them",
    )
    parser.add_argument(
        "--max-queued",
        type=_whole("number of calls", 0),
        metavar="N",
        help="calls that may wait for a worker, or for their session's running call (default 32); "
        "a call past it gets a retryable error at once; over HTTP one MCP session may queue at most half",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=_byte_count("--max-message-bytes", 4096),
        metavar="SIZE",
        help="the largest JSON-RPC message read (default 4M); a longer one is discarded and answered with an error",
    )
    parser.add_argument(
        "--max-result-bytes",
        type=_byte_count("--max-result-bytes", 4096),
        metavar="SIZE",
        help="the largest tool result, text and structured content together (default 1M); what does not fit is "
        "cut and named in `truncated`",
    )
    parser.add_argument(
        "--pool-size",
        type=_whole("pool size", 1),
        metavar="N",
        help="without --session: fresh workers kept warm for the next calls (default 2)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="seconds one call may take (default 30); a call's own timeout may only lower it",
    )
    parser.add_argument(
        "--max-memory", type=parse_size, metavar="SIZE", help=f"each worker's memory cap: {SIZE_FORMS}; default 512M"
    )
    parser.add_argument(
        "--cpu-limit", type=_seconds, metavar="SECONDS", help="CPU seconds one call may use (default: no cap)"
    )
    parser.add_argument(
        "--sandbox", choices=SANDBOX_MODES, help="OS sandbox: require every layer (default), best_effort, or off"
    )
    parser.add_argument(
        "--max-code-bytes",
        type=_whole("size", 1),
        metavar="N",
        help="refuse a program longer than N bytes of UTF-8 (default 100000)",
    )
    parser.add_argument(
        "--package",
        action="append",
        metavar="SPEC",
        help="an npm package programs may import, e.g. zod@3.23.8 (repeat for more); bundled on this host at start",
    )
    parser.add_argument(
        "--package-lock", metavar="PATH", help="the lockfile that pins --package versions and bundle hashes"
    )
    return parser


def _mcp(argv: Sequence[str]) -> int:
    parser = _mcp_parser()
    args = parser.parse_args(argv)
    if not args.http and (args.host is not None or args.port is not None or args.allow_host):
        parser.error("--host, --port and --allow-host need --http (without it the server speaks over stdio)")
    # The server's --timeout is its own (a call may lower it), so it is checked, not kept here.
    options = _runtime_options(parser, args, ("max_memory", "cpu_limit", "sandbox"))
    if args.timeout is not None:
        _check_options(parser, {**options, "timeout": args.timeout})
    # The SDK's import is most of a launch: the zygote that forks confined workers gets
    # ready in its own process meanwhile, so the first call does not wait for it too.
    from .._runtime.prestart import prestart

    prestart(str(options.get("sandbox", "require")))
    try:
        from .mcp_server import ServerConfig, serve
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in {"mcp", "mcp_types", "uvicorn", "starlette"}:
            raise
        print(MCP_EXTRA_MISSING, file=sys.stderr)
        return EXIT_FAILURE
    if args.package_lock is not None and not args.package:
        parser.error("--package-lock needs --package")
    if args.store is not None and not args.session:
        parser.error("--store needs --session: it keeps the sessions, and without --session there are none")
    if args.package:
        from .._base.packages import Packages

        try:
            options["packages"] = Packages(args.package, lockfile=args.package_lock)
        except (TypeError, ValueError) as exc:
            parser.error(f"--package: {exc}")
        except PydenoError as exc:
            print(f"pydeno mcp: {exc}", file=sys.stderr)
            return EXIT_FAILURE
    config = ServerConfig(http=args.http, session=args.session, runtime=options)
    workers = config.max_workers if args.max_workers is None else args.max_workers
    if args.session and args.max_sessions is None:
        args.max_sessions = min(config.max_sessions, workers)
    if args.session and args.max_sessions > workers:
        parser.error(f"--max-sessions {args.max_sessions} is over --max-workers {workers}: each session holds a worker")
    changes: dict[str, Any] = {
        name: value
        for name, value in (
            ("host", args.host),
            ("port", args.port),
            ("idle_timeout", args.idle_timeout),
            ("pool_size", args.pool_size),
            ("max_sessions", args.max_sessions),
            ("max_code_bytes", args.max_code_bytes),
            ("max_workers", args.max_workers),
            ("max_queued", args.max_queued),
            ("max_message_bytes", args.max_message_bytes),
            ("max_result_bytes", args.max_result_bytes),
            ("allow_hosts", tuple(args.allow_host) if args.allow_host else None),
            ("timeout", args.timeout),
        )
        if value is not None
    }
    if args.store is not None:
        from .mcp_store import StoreSetupError, open_store

        try:
            changes["store"], changes["store_key"] = open_store(args.store)
        except StoreSetupError as exc:
            parser.error(str(exc))
    return serve(dataclasses.replace(config, **changes))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on argv (default ``sys.argv[1:]``) and return the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    # A subcommand only as the first argument; anything else is code and its options.
    commands = {"doctor": _doctor, "errors": _errors, "mcp": _mcp}
    if args and args[0] in commands:
        return commands[args[0]](args[1:])
    return _evaluate(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
