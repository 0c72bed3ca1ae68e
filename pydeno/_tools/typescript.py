"""TypeScript for tools: the one emitter of what a guest's ``tools`` look like.

``ts_of(schema)`` is the TypeScript type of a JSON Schema (``x-wire`` names a wire type JSON
has no word for: ``Uint8Array``, ``Date``, ``Set``). ``declarations(tools)`` writes the
``.d.ts`` lines of a set of tools, whichever way each takes its arguments: a tool of named
arguments gets an interface for its input (and output, and each named type) and is declared
as ``name(args: NameInput): Promise<NameOutput>``; a positional tool (a ``ToolBridge``'s) as
``name(a: A, b?: B, ...rest: C[]): Promise<R>``. Dotted names become nested objects.
``signature(tool)`` is one tool's entry for a prompt. ``CodeMode.typescript()``,
``ToolBridge.typescript()`` and ``AgentSandbox.typescript()`` all come from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .schema import WIRE

if TYPE_CHECKING:
    from .tool import Tool

__all__ = ["declarations", "doc_comment", "signature", "ts_name", "ts_of"]


_IDENT: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")


def ts_name(name: str) -> str:
    """A TypeScript type name made of ``name``'s words (``search_issues`` -> ``SearchIssues``)."""
    words = re.split(r"[^A-Za-z0-9]+", name)
    out = "".join(w[:1].upper() + w[1:] for w in words if w)
    return out if out and not out[0].isdigit() else f"T{out}"


def _key(name: str) -> str:
    return name if _IDENT.match(name) else json.dumps(name)


def doc_comment(text: str | None, indent: str) -> list[str]:
    """A JSDoc block for text (nothing for none); ``*/`` in the text cannot end it."""
    if not text:
        return []
    lines = text.replace("*/", "*\\/").splitlines() or [text]
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**", *(f"{indent} * {line}".rstrip() for line in lines), f"{indent} */"]


def schema_notes(schema: Mapping[str, Any]) -> str | None:
    """A schema's description and constraints as a comment's text."""
    parts: list[str] = []
    if isinstance(schema.get("description"), str):
        parts.append(schema["description"])
    notes = []
    for key in (
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "default",
    ):
        if key in schema:
            notes.append(
                f"@{key} {json.dumps(schema[key])}" if key != "default" else f"@default {json.dumps(schema[key])}"
            )
    if schema.get("examples"):
        notes.append(f"@example {json.dumps(schema['examples'][0])}")
    if schema.get("deprecated") is True:
        notes.append("@deprecated")
    parts.extend(notes)
    return "\n".join(parts) or None


def ts_of(schema: Any, refs: Mapping[str, str], indent: str = "") -> str:
    """The TypeScript type of a JSON Schema; ``refs`` maps ``$ref`` targets to type names."""
    if schema is True or schema == {}:
        return "unknown"
    if schema is False:
        return "never"
    if not isinstance(schema, Mapping):
        return "unknown"
    if "$ref" in schema:
        return refs.get(schema["$ref"], "unknown")
    wire = schema.get(WIRE)
    if wire == "Set":
        return f"Set<{ts_of(schema.get('items', True), refs, indent)}>"
    if isinstance(wire, str):
        return wire
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema and isinstance(schema["enum"], list):
        return " | ".join(json.dumps(v) for v in schema["enum"]) or "never"
    for key, joiner in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
        if isinstance(schema.get(key), list) and schema[key]:
            # Once each: int | float is number, not number | number.
            return joiner.join(dict.fromkeys(_paren(ts_of(s, refs, indent)) for s in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(ts_of({**schema, "type": k}, refs, indent) for k in kind) or "never"
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        if isinstance(schema.get("prefixItems"), list):
            return "[" + ", ".join(ts_of(s, refs, indent) for s in schema["prefixItems"]) + "]"
        return f"{_paren(ts_of(schema.get('items', True), refs, indent))}[]"
    if kind == "object" or "properties" in schema:
        return object_body(schema, refs, indent)
    return "unknown"


def object_body(schema: Mapping[str, Any], refs: Mapping[str, str], indent: str) -> str:
    """The ``{ ... }`` of an object schema, one member per line with its comment."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    extra = schema.get("additionalProperties", True)
    if not properties:
        if extra is False:
            return "Record<string, never>"
        return f"Record<string, {ts_of(extra, refs, indent)}>"
    inner = indent + "  "
    lines = ["{"]
    for name, sub in properties.items():
        lines.extend(doc_comment(schema_notes(sub) if isinstance(sub, Mapping) else None, inner))
        mark = "" if name in required else "?"
        lines.append(f"{inner}{_key(name)}{mark}: {ts_of(sub, refs, inner)};")
    if extra not in (False, None) and extra is not True and extra != {}:
        lines.append(f"{inner}[key: string]: {ts_of(extra, refs, inner)} | undefined;")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _paren(text: str) -> str:
    return f"({text})" if (" | " in text or " & " in text) and not text.startswith("{") else text


# --- a set of tools -----------------------------------------------------------------------


def declarations(tools: Iterable[Tool]) -> list[str]:
    """The ``.d.ts`` lines of tools: the types each names, then ``declare const tools``."""
    lines: list[str] = []
    tree: dict[str, Any] = {}
    for t in tools:
        refs = _types(t, lines)
        node = tree
        parts = t.name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = (t, refs)
    lines.append("declare const tools: " + _namespace(tree, "") + ";")
    return lines


def _base(t: Tool) -> str:
    return ts_name(t.name.replace(".", "_"))


def _refs(t: Tool) -> dict[str, str]:
    """The type names t's schemas' references stand for (a positional tool has none)."""
    refs: dict[str, str] = {}
    if t.positional:
        return refs
    base = _base(t)
    for schema in (t.input_schema, t.output_schema or {}):
        for name in schema.get("$defs") or {}:
            refs.setdefault(f"#/$defs/{name}", f"{base}_{ts_name(name)}")
    return refs


def _types(t: Tool, lines: list[str]) -> dict[str, str]:
    """Declare the named types, input and output of t (a tool of named arguments), adding
    their lines; the names its schemas' references stand for."""
    refs = _refs(t)
    if t.positional:
        return refs
    base = _base(t)
    emitted = set()
    for schema in (t.input_schema, t.output_schema or {}):
        for name, sub in (schema.get("$defs") or {}).items():
            type_name = refs[f"#/$defs/{name}"]
            if type_name in emitted:
                continue
            emitted.add(type_name)
            lines.extend(doc_comment(sub.get("description") if isinstance(sub, Mapping) else None, ""))
            lines.append(_declare(type_name, sub, refs))
            lines.append("")
    lines.extend(doc_comment(f"Arguments of tools.{t.name}().", ""))
    lines.append(_declare(f"{base}Input", t.input_schema, refs))
    lines.append("")
    if t.output_schema is not None:
        lines.extend(doc_comment(f"What tools.{t.name}() returns.", ""))
        lines.append(_declare(f"{base}Output", t.output_schema, refs))
        lines.append("")
    return refs


def _declare(name: str, schema: Mapping[str, Any], refs: Mapping[str, str]) -> str:
    if schema.get("type") == "object" and "properties" in schema:
        body = object_body(schema, refs, "")
        # An object with no properties is a Record<...>, which only a type alias can name.
        return f"interface {name} {body}" if body.startswith("{") else f"type {name} = {body};"
    return f"type {name} = {ts_of(schema, refs)};"


def _namespace(tree: Mapping[str, Any], indent: str) -> str:
    inner = indent + "  "
    lines = ["{"]
    for key, node in tree.items():
        if isinstance(node, tuple):
            t, refs = node
            lines.extend(doc_comment(_member_doc(t), inner))
            params = ", ".join(_param_text(p) for p in _parameters(t, refs))
            lines.append(f"{inner}{_key(key)}({params}): Promise<{_returns(t, refs)}>;")
        else:
            lines.append(f"{inner}{_key(key)}: {_namespace(node, inner)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _member_doc(t: Tool) -> str | None:
    parts = [t.description] if t.description else []
    if t.read_only:
        parts.append("Read-only: it changes nothing.")
    return "\n".join(parts) or None


def _param_text(p: dict[str, Any]) -> str:
    # A rest parameter is never marked optional: TypeScript refuses "...args?".
    optional = "" if p["required"] or p["name"].startswith("...") else "?"
    return f"{p['name']}{optional}: {p['type']}"


def _parameters(t: Tool, refs: Mapping[str, str]) -> list[dict[str, Any]]:
    schema = t.input_schema
    if not t.positional:
        return [{"name": "args", "type": f"{_base(t)}Input", "required": bool(schema.get("required"))}]
    items = schema.get("prefixItems") or []
    needed = schema.get("minItems", 0)
    out = [
        {"name": s.get("title", f"arg{i}"), "type": ts_of(_untitled(s), refs), "required": i < needed}
        for i, s in enumerate(items)
    ]
    rest = schema.get("items", False)
    if isinstance(rest, Mapping):
        out.append(
            {
                "name": f"...{rest.get('title', 'rest')}",
                "type": f"{_paren(ts_of(_untitled(rest), refs))}[]",
                "required": False,
            }
        )
    return out


def _untitled(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "title"}


def _returns(t: Tool, refs: Mapping[str, str]) -> str:
    if t.output_schema is None:
        return "unknown"
    return ts_of(t.output_schema, refs) if t.positional else f"{_base(t)}Output"


def signature(t: Tool) -> dict[str, Any]:
    """One tool for a prompt: its name, description, parameters (name, TypeScript type,
    required) and return type."""
    refs = _refs(t)
    return {
        "name": t.name,
        "description": t.description or "",
        "parameters": _parameters(t, refs),
        "returns": _returns(t, refs),
        "async": t.is_async,
    }
