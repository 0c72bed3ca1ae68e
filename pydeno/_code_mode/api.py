"""What a Code Mode offers a program: its tools, the packages it may import, and the
prompt and declarations a model reads before it writes.

The tools are a :class:`~pydeno._tools.toolset.ToolSet` of :class:`~pydeno.Tool` (the one
tool model a ``ToolBridge`` also uses); their declarations come from the one TypeScript
emitter, pydeno/_tools/typescript.py, and the packages' from pydeno/_base/packages.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._base.checks import optional_count
from .._base.packages import Packages, checker_inputs, declarations, prompt_line
from .._runtime.checking import type_errors as check_types
from .._tools.approval import ApprovePolicy, check_policy
from .._tools.tool import Tool
from .._tools.toolset import ToolSet

__all__ = ["CodeModeTools", "as_tools", "type_errors"]


def as_tools(tools: Any, *, kinds: str = "pydeno.Tool objects or functions") -> list[Tool]:
    """tools= as a list of Tool: Tool objects, or plain functions made into tools. ``kinds``
    names what the caller accepts, for the error about an item that is neither (an
    integration that also takes its framework's tools has converted those already)."""
    # A mapping of names to functions is a ToolBridge's (an agent's) form: its keys are no tools.
    if isinstance(tools, (Tool, str, bytes, Mapping)) or callable(tools) or not isinstance(tools, Iterable):
        raise TypeError(f"tools must be a list of pydeno.Tool (or functions), got {type(tools).__name__}")
    out: list[Tool] = []
    for item in tools:
        if isinstance(item, Tool):
            out.append(item)
        elif callable(item):
            out.append(Tool(getattr(item, "__name__", ""), item))
        else:
            raise TypeError(f"tools must be {kinds}, got {type(item).__name__}")
    return out


class CodeModeTools:
    """The tools of one Code Mode (``max_tool_calls`` a budget per execution), their
    approval policy and the packages a program may import: declarations and prompt."""

    def __init__(
        self, tools: Any, *, max_tool_calls: int | None, approve: Any, packages: Packages | None = None
    ) -> None:
        self.packages = packages
        made = as_tools(tools)
        self.set = ToolSet(made, max_calls=optional_count("max_tool_calls", max_tool_calls, 0))
        self.approve: ApprovePolicy = check_policy(approve, self.set.tools)
        # A session's Code Mode (a SessionPool's): its runs share its declarations, its
        # clock and its tool budget, ``session_calls`` (None: no limit).
        self.in_session = False
        self.session_calls: int | None = None

    @property
    def tools(self) -> dict[str, Tool]:
        return self.set.tools

    @property
    def max_tool_calls(self) -> int | None:
        return self.set.max_calls

    # -- declarations ----------------------------------------------------------------------
    def typescript(self) -> str:
        """A ``.d.ts`` of the whole API: one interface per schema and named type, JSDoc from
        descriptions and annotations, namespaces as nested objects, and the packages a
        program may import (what a package's own declarations export, as a comment)."""
        return "\n".join([*self.set.declarations(), *declarations(self.packages)]) + "\n"

    def checked_against(self) -> tuple[str, dict[str, str], dict[str, str]]:
        """What the type checker reads: the tools' declarations with an ambient module for
        each package that has no declarations of its own, the others' declaration files, and
        the import map that names them."""
        ambient, files, imports = checker_inputs(self.packages)
        return "\n".join([*self.set.declarations(), *ambient]) + "\n", files, imports

    def describe(self) -> str:
        """A compact prompt text: how to write code against the API, and what is not there."""
        lines = [
            "Write a TypeScript (or JavaScript) program. It runs in a sandbox and its result goes back to you.",
            "- The value of the program's last expression is its result (top-level await works; a top-level "
            "`return value` ends the program with that value). Keep the result small: return what you need, "
            "not everything.",
            "- Call tools as `await tools.<name>({ ...arguments })`: each takes one object of named arguments and "
            "returns a promise. A failed call throws an Error you can catch; its message says what was wrong.",
            "- console.log output is returned too, cut to a limit.",
            "- There is no network, no file system, no `Deno`, `process` or `require`, and "
            f"{prompt_line(self.packages)}: only the language, its standard objects and `tools`.",
            "- Top-level declarations (`let`, `const`, `function`, `class`) and globals stay for the next run of "
            "this session."
            if self.in_session
            else "- `let`, `const` and `class` declarations stay in one run; assign to `globalThis` to keep a value "
            "for the next run.",
            "- A run that fails returns an error whose `hint` says what the program can change; the sandbox's "
            "limits (time, memory, calls) are fixed for the program.",
        ]
        if self.in_session:
            lines.append(
                "- `Date` and `Date.now()` stay at the session's start and `Math.random` is seeded: the session is "
                "restored by running its programs again, with the tools' recorded answers."
            )
            if self.session_calls is not None:
                lines.append(f"- At most {self.session_calls} tool calls in this session, across all its runs.")
        elif self.max_tool_calls is not None:
            lines.append(f"- At most {self.max_tool_calls} tool calls per run.")
        lines.append("")
        lines.append("Tools:")
        for t in self.tools.values():
            marks = " (read-only)" if t.read_only else ""
            lines.append(f"- tools.{t.name}({_params_line(t)}){marks}: {t.description or 'no description'}")
        lines.append("")
        lines.append("TypeScript declarations:")
        lines.append(self.typescript().rstrip())
        return "\n".join(lines) + "\n"


def _params_line(t: Tool) -> str:
    properties = t.input_schema.get("properties") or {}
    required = set(t.input_schema.get("required") or [])
    if not properties:
        return ""
    return "{ " + ", ".join(f"{k}{'' if k in required else '?'}" for k in properties) + " }"


def type_errors(tools: CodeModeTools, code: str, *, sandbox: str, timeout: float) -> Exception | None:
    """The failure to report instead of running code: its type errors against the tools'
    declarations (a TypeCheckError), the checker's own failure, or None when it type-checks."""
    declared, files, imports = tools.checked_against()
    return check_types(declared, code, files=files, imports=imports, sandbox=sandbox, timeout=timeout)
