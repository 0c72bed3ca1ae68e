"""``Tool`` and ``@tool``: a host function with a JSON Schema, validated on every call.

A tool takes one object of named arguments, as MCP tools do: ``tools.search({query: "x"})``
in the guest. Its input schema is either given (a raw JSON Schema whose top level is an
object; the function then receives that object as its one argument) or made from the
function's signature and type hints (each parameter a property; the function is called with
them as keyword arguments, dataclasses and pydantic models built from their plain form).
Arguments are checked against the schema on the host before the function runs, by
``jsonschema`` (draft 2020-12, as JSON means it: see ``validation.Validator``); results against
the output schema, when there is one, after. A refused call raises :class:`~pydeno.ToolError`
with the field and the reason, which is what the guest catches.

Hints are resolved where the function lives and, for types local to a function (a
``TypedDict`` defined next to the tool under ``from __future__ import annotations``), in the
locals of the frame that made the tool, as pydantic resolves them.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, overload

import jsonschema
import jsonschema.exceptions

from .._base.errors import ToolError
from .schema import (
    Defs,
    SchemaError,
    build,
    first_paragraph,
    is_pydantic_field,
    plain,
    schema_of,
    type_hints,
    with_default,
)
from .validation import Validator, overlong_integer, reason

__all__ = ["Tool", "check_name", "check_namespaces", "positional_tool", "tool"]

_SEGMENT: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
_SECTION: Final = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_GOOGLE_ARG: Final = re.compile(r"^\**(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_ARG: Final = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")


def check_name(name: Any) -> str:
    """A tool's name: JavaScript identifiers joined by dots (``github.search_issues``)."""
    if not isinstance(name, str):
        raise TypeError(f"a tool name must be a str, got {type(name).__name__}")
    if not all(_SEGMENT.match(segment) for segment in name.split(".")):
        raise ValueError(
            f"tool name {name!r} is not a JavaScript identifier (letters, digits, _ or $), "
            "or several joined by dots for a namespace"
        )
    return name


def check_namespaces(names: Mapping[str, object]) -> None:
    """No name may be both a tool and a namespace of others (``a`` and ``a.b``): the guest's
    ``tools`` object could hold only one of them."""
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix in names:
                raise ValueError(f"tool name {prefix!r} is both a tool and the namespace of {name!r}")


def _check_schema(name: str, which: str, schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        raise TypeError(f"tool {name!r}: {which} must be a JSON Schema object (a dict), got {type(schema).__name__}")
    try:
        Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise ValueError(
            f"tool {name!r}: {which} is not a valid JSON Schema (draft 2020-12): {exc.message} (at {where})"
        ) from None
    return Validator(schema)


def _maker_locals() -> dict[str, Any] | None:
    """The locals of the function that is making a tool: the first frame outside pydeno
    (``@tool``, ``Tool(...)`` and ``CodeMode([fn])`` all come through here). None at a
    module's top level, whose names the function's own globals already hold."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "pydeno":
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None or frame.f_locals is frame.f_globals:
        return None
    return dict(frame.f_locals)


def _where(error: jsonschema.exceptions.ValidationError) -> str:
    return error.json_path if error.json_path != "$" else "the arguments"


def parameter_docs(doc: str) -> dict[str, str]:
    """Each parameter's description from a Google-style ``Args:`` section or reST ``:param``."""
    found: dict[str, str] = {}
    lines = doc.splitlines()
    current: str | None = None
    in_section = False
    section_indent = arg_indent = 0
    for line in lines:
        stripped = line.strip()
        rest = _REST_ARG.match(stripped)
        if rest:
            current = rest.group(1)
            found[current] = rest.group(2).strip()
            continue
        if _SECTION.match(stripped):
            in_section, current, section_indent = True, None, len(line) - len(line.lstrip())
            continue
        if not in_section:
            if current is not None and stripped and not stripped.startswith(":"):
                found[current] = f"{found[current]} {stripped}".strip()
            elif not stripped or stripped.startswith(":"):
                current = None
            continue
        indent = len(line) - len(line.lstrip())
        if stripped and indent <= section_indent:
            in_section, current = False, None
            continue
        google = _GOOGLE_ARG.match(stripped)
        if google and (current is None or indent <= arg_indent):
            current, arg_indent = google.group(1), indent
            found[current] = google.group(2).strip()
        elif current is not None and stripped:
            found[current] = f"{found[current]} {stripped}".strip()
    return {k: v for k, v in found.items() if v}


def _description(fn: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(fn)
    if not doc:
        return None
    head = doc.split("\n\n")[0]
    if _SECTION.match(head.strip().splitlines()[0]):
        return None
    return first_paragraph(doc) or None


class Tool:
    """``Tool(name, fn, *, description=None, input_schema=None, output_schema=None,
    read_only=False)``.

    ``name`` may be namespaced with dots (``github.search_issues`` is
    ``tools.github.search_issues(...)`` in the guest). Without ``input_schema`` the schema
    is made from ``fn``'s type hints and its description from the docstring; with one,
    ``fn`` receives the validated arguments object. ``read_only`` marks a tool that changes
    nothing, which approval policies let run at once. A ``Tool`` is still callable as the
    function it wraps.
    """

    __slots__ = (
        "_fields",
        "_hints",
        "_inputs",
        "_keywords",
        "_outputs",
        "_signature",
        "description",
        "fn",
        "input_schema",
        "is_async",
        "name",
        "output_schema",
        "positional",
        "read_only",
    )

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        description: str | None = None,
        input_schema: Mapping[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        read_only: bool = False,
    ) -> None:
        self.name = check_name(name)
        if not callable(fn):
            raise TypeError(f"tool {name!r} must be callable, got {type(fn).__name__}")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"tool {name!r}: description must be a str or None, got {type(description).__name__}")
        if not isinstance(read_only, bool):
            raise TypeError(f"tool {name!r}: read_only must be a bool, got {type(read_only).__name__}")
        self.fn = fn
        self.read_only = read_only
        self.positional = False
        self._signature: inspect.Signature | None = None
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        self.description = description if description is not None else _description(fn)
        self._hints: dict[str, Any] = {}
        self._fields: dict[Any, dict[str, Any]] = {}
        localns = _maker_locals() if input_schema is None else None
        if input_schema is not None:
            _check_schema(name, "input_schema", input_schema)
            self.input_schema = dict(input_schema)
            self._keywords = False
        else:
            self.input_schema, self._hints = self._schema_from(fn, localns)
            self._keywords = True
        self._inputs = _check_schema(name, "input_schema", self.input_schema)
        if self.input_schema.get("type") != "object":
            raise ValueError(
                f'tool {name!r}: input_schema must describe an object ("type": "object"): '
                "a tool takes one object of named arguments"
            )
        if output_schema is None and input_schema is None:
            output_schema = self._output_from(localns)
        if output_schema is not None:
            _check_schema(name, "output_schema", output_schema)
        self.output_schema = dict(output_schema) if output_schema is not None else None
        self._outputs = (
            _check_schema(name, "output_schema", self.output_schema) if self.output_schema is not None else None
        )

    # -- schemas from a function ---------------------------------------------------------
    def _schema_from(
        self, fn: Callable[..., Any], localns: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            raise TypeError(
                f"tool {self.name!r}: {fn!r} has no signature to make a schema from; pass input_schema="
            ) from None
        try:
            hints = type_hints(fn, localns)
        except Exception as exc:  # noqa: BLE001 - any failure to resolve a name is the same misuse
            raise TypeError(f"tool {self.name!r}: its type hints cannot be resolved ({exc})") from None
        docs = parameter_docs(inspect.getdoc(fn) or "")
        # The maker's locals are needed only while hints are resolved: the fields resolved
        # are kept for building arguments, the frame's other values are not.
        defs = Defs(localns)
        self._fields = defs.fields
        properties: dict[str, Any] = {}
        required: list[str] = []
        extra: Any = False
        for p in signature.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise TypeError(
                    f"tool {self.name!r}: parameter {p.name!r} cannot be named in an arguments object "
                    "(positional-only or *args); a tool takes named arguments"
                )
            if is_pydantic_field(p.default):
                raise TypeError(
                    f"tool {self.name!r}: parameter {p.name!r}: a pydantic Field as a default is not applied when "
                    f"the tool is called; write {p.name}: Annotated[<type>, Field(...)] = <default>"
                )
            try:
                schema = schema_of(hints.get(p.name, Any), defs)
            except SchemaError as exc:
                raise TypeError(f"tool {self.name!r}: parameter {p.name!r}: {exc}") from None
            if p.kind is p.VAR_KEYWORD:
                extra = schema
                continue
            if p.name in docs and "description" not in schema:
                schema = {**schema, "description": docs[p.name]}
            if p.default is p.empty:
                required.append(p.name)
            else:
                schema = with_default(schema, p.default)
            properties[p.name] = schema
        out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": extra}
        if required:
            out["required"] = required
        if defs:
            out["$defs"] = dict(defs)
        return out, hints

    def _output_from(self, localns: dict[str, Any] | None) -> dict[str, Any] | None:
        hint = self._hints.get("return", inspect.Parameter.empty)
        if hint is inspect.Parameter.empty or hint is Any:
            return None
        defs = Defs(localns)
        try:
            schema = schema_of(hint, defs)
        except SchemaError:
            return None  # a return hint JSON cannot state (bytes, say): the result is unchecked
        if defs:
            schema = {**schema, "$defs": dict(defs)}
        return schema

    # -- calls ---------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<pydeno.Tool {self.name}{' (read-only)' if self.read_only else ''}>"

    def arguments(self, args: Any) -> Any:
        """The arguments of a guest's call (the list it passed) as this tool takes them: one
        object of named arguments, or the list itself for a positional tool."""
        if self.positional:
            if not isinstance(args, list):
                raise ToolError(f"tools.{self.name}() was called with malformed arguments")
            return args
        if not isinstance(args, list) or len(args) > 1:
            raise ToolError(f"tools.{self.name}() takes one object of named arguments")
        return args[0] if args else {}

    def validate(self, arguments: Any) -> None:
        """Raise ToolError saying which field is wrong and why, if arguments do not match."""
        if self.positional:
            if self._signature is not None:
                try:
                    self._signature.bind(*arguments)
                except TypeError as exc:
                    raise ToolError(f"tools.{self.name}(): {exc}") from None
            return
        where = overlong_integer(arguments)
        if where is not None:
            # Before jsonschema, whose messages would fail to write such an int.
            raise ToolError(
                f"tools.{self.name}(): invalid arguments: {where}: an integer of more than "
                f"{sys.get_int_max_str_digits()} digits is refused"
            )
        error = jsonschema.exceptions.best_match(self._inputs.iter_errors(arguments))
        if error is not None:
            raise ToolError(f"tools.{self.name}(): invalid arguments: {_where(error)}: {reason(error)}")

    def start(self, arguments: Any) -> Any:
        """Validate arguments and call the function: its result, or an awaitable of it."""
        self.validate(arguments)
        if self.positional:
            return self.fn(*arguments)
        if not self._keywords:
            return self.fn(arguments)
        built = {name: build(self._hints.get(name, Any), value, self._fields) for name, value in arguments.items()}
        return self.fn(**built)

    def finish(self, result: Any) -> Any:
        """The result as the wire carries it, checked against the output schema (a positional
        tool's result goes as it is: its schema only describes it)."""
        if self.positional:
            return result
        result = plain(result)
        if self._outputs is not None:
            error = jsonschema.exceptions.best_match(self._outputs.iter_errors(result))
            if error is not None:
                where = error.json_path if error.json_path != "$" else "the result"
                raise ToolError(
                    f"tools.{self.name}() returned a value its output schema refuses: {where}: {reason(error)}"
                )
        return result

    def invoke(self, arguments: Any) -> Any:
        """Start the call and finish its result: the result, or an awaitable of it."""
        result = self.start(arguments)
        if self.positional:
            return result
        if self.is_async or hasattr(result, "__await__"):
            return self._finish_later(result)
        return self.finish(result)

    async def _finish_later(self, result: Any) -> Any:
        return self.finish(await result)


def positional_tool(name: str, fn: Callable[..., Any]) -> Tool:
    """A tool the guest calls with positional arguments, as a ``ToolBridge``'s are:
    ``tools.add(1, 2)``. Its values are the wire's, not JSON: its schemas, made from fn's hints
    (``Defs(wire=True)``), describe them for declarations, and a call is checked against fn's
    signature only. Its input schema is an array: one item per parameter, titled with its
    name, ``minItems`` the required ones, ``items`` the rest parameter (or false)."""
    check_name(name)
    if not callable(fn):
        raise TypeError(f"tool {name!r} must be callable, got {type(fn).__name__}")
    made = object.__new__(Tool)
    made.name, made.fn, made.read_only, made.positional = name, fn, False, True
    made.is_async = inspect.iscoroutinefunction(fn)
    made.description = _description(fn)
    made._keywords, made._inputs, made._outputs, made._fields = False, None, None, {}
    try:
        made._hints = type_hints(fn, None, extras=False)
    except Exception:  # noqa: BLE001 - unresolvable annotations: described without types
        made._hints = {}
    try:
        made._signature = inspect.signature(fn)
        parameters = list(made._signature.parameters.values())
    except (TypeError, ValueError):  # builtins without a signature: the call decides
        made._signature, parameters = None, []
    defs = Defs(wire=True)
    items: list[dict[str, Any]] = []
    rest: Any = False
    needed = 0
    for p in parameters:
        if p.kind in (p.VAR_KEYWORD, p.KEYWORD_ONLY):
            continue  # the guest passes positional arguments only
        schema = {"title": p.name, **_wire_schema(made._hints.get(p.name, Any), defs)}
        if p.kind is p.VAR_POSITIONAL:
            rest = schema
            continue
        if p.default is p.empty:
            needed += 1
        items.append(schema)
    made.input_schema = {"type": "array", "prefixItems": items, "minItems": needed, "items": rest}
    made.output_schema = _wire_schema(made._hints.get("return", Any), defs)
    return made


def _wire_schema(hint: Any, defs: Defs) -> dict[str, Any]:
    try:
        return schema_of(hint, defs)
    except SchemaError:
        return {}


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    read_only: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    read_only: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """``@tool`` or ``@tool(name=..., read_only=True, ...)``: a :class:`Tool` from a function,
    named after it unless ``name=`` says otherwise."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool(
            name if name is not None else getattr(f, "__name__", ""),
            f,
            description=description,
            input_schema=input_schema,
            output_schema=output_schema,
            read_only=read_only,
        )

    if fn is not None:
        if not callable(fn):
            raise TypeError(f"@tool decorates a function, got {type(fn).__name__}; options go as keywords")
        return make(fn)
    return make
