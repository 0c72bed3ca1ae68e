"""JSON Schema for tools: from Python type hints, and values to and from them.

Pure translations, no I/O:

* ``schema_of(hint, defs)``: the JSON Schema (draft 2020-12) of a Python type hint. Named
  types (``TypedDict``, dataclasses, enums, pydantic models) go into ``defs`` once and are
  referenced as ``#/$defs/<Name>``, so a schema stays small and a declaration file gets one
  interface per type. Its TypeScript is pydeno/_tools/typescript.py's.
* ``build(hint, value)`` turns a validated argument into what the Python function declared
  (a dataclass or pydantic model from a plain object, an ``int`` from an integral number),
  and ``plain(value)`` turns what a tool returned into values the wire carries (dataclasses
  and models into plain objects).

Hints that JSON cannot carry exactly (``bytes``, ``datetime``, ``set``, ``complex``) are
refused with the hint named, at the moment a tool is made, not when a guest calls it; so is
``Annotated`` metadata whose bound the schema cannot state.

A positional tool (a ``ToolBridge``'s function) takes and returns wire values, which are
not JSON: its schemas are made with ``Defs(wire=True)``, where ``bytes``, ``datetime`` and
sets are named by the ``x-wire`` keyword (``Uint8Array``, ``Date``, ``Set``), named types and
hints without a schema are ``{}`` (any value), and nothing is refused. Such schemas describe;
they are never used to validate.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
import json
import sys
import types
import typing
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Final

from jsonschema import Draft202012Validator

__all__ = [
    "WIRE",
    "Defs",
    "SchemaError",
    "build",
    "first_paragraph",
    "is_pydantic_field",
    "plain",
    "schema_of",
    "type_hints",
    "with_default",
]

# The keyword that names a wire type JSON Schema has no word for (see the module's text).
WIRE: Final = "x-wire"


class SchemaError(TypeError):
    """A type hint has no exact JSON Schema."""


class Defs(dict[str, Any]):
    """The ``$defs`` of a schema being built, which Python type made each name, the
    namespace string hints of local types resolve in (the frame that made the tool), and the
    field hints resolved so far, which ``build`` reuses on every call."""

    def __init__(self, localns: Mapping[str, Any] | None = None, *, wire: bool = False) -> None:
        super().__init__()
        self.wire = wire
        self.owners: dict[str, Any] = {}
        self.localns = localns
        self.fields: dict[Any, dict[str, Any]] = {}

    def hints(self, hint: Any) -> dict[str, Any]:
        """The resolved field hints of a TypedDict or dataclass."""
        if hint not in self.fields:
            self.fields[hint] = type_hints(hint, self.localns)
        return self.fields[hint]

    def claim(self, name: str, hint: Any) -> bool:
        """Whether name is new (then it is hint's); refuses two types with one name."""
        owner = self.owners.setdefault(name, hint)
        if owner is not hint:
            raise SchemaError(f"two different types are named {name!r} in one tool: rename one")
        return name not in self


_SIMPLE: Final[dict[Any, dict[str, Any]]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
    Any: {},
    object: {},
}


def type_hints(obj: Any, localns: Mapping[str, Any] | None, *, extras: bool = True) -> dict[str, Any]:
    """obj's resolved type hints; a name its own module and class cannot resolve is looked up
    in localns (the locals of the function that made the tool, where a local type lives)."""
    try:
        return typing.get_type_hints(obj, include_extras=extras)
    except NameError:
        if not localns:
            raise
        namespace = dict(localns)
        if isinstance(obj, type):
            namespace.update(vars(obj))  # what get_type_hints would have used for a class
        return typing.get_type_hints(obj, localns=namespace, include_extras=extras)


def _pydantic_model(hint: Any) -> bool:
    # Looked up, never imported: pydantic is optional, and a model exists only once it is.
    base = _pydantic_base()
    return base is not None and isinstance(hint, type) and issubclass(hint, base)


def _pydantic_base() -> type | None:
    import sys

    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None)
    return base if isinstance(base, type) else None


def _pydantic_dataclass(hint: Any) -> bool:
    # pydantic's dataclasses keep their constraints in Field defaults, which only pydantic reads.
    return isinstance(hint, type) and dataclasses.is_dataclass(hint) and "__pydantic_fields__" in vars(hint)


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__required_keys__")


def _described(schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    if description:
        return {**schema, "description": description}
    return schema


def schema_of(hint: Any, defs: Defs) -> dict[str, Any]:
    """The JSON Schema of ``hint``; named types are added to ``defs``."""
    if hint in _SIMPLE:
        return dict(_SIMPLE[hint])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if defs.wire:
        found = _wire_schema(hint, origin, args, defs)
        if found is not None:
            return found
    if origin is typing.Annotated:
        return _annotated(args[0], args[1:], defs)
    if origin in (typing.Union, types.UnionType):
        members = [schema_of(a, defs) for a in args]
        return members[0] if len(members) == 1 else {"anyOf": members}
    if origin is typing.Literal:
        for value in args:
            if not isinstance(value, (str, int, float, bool)) and value is not None:
                raise SchemaError(f"Literal[{value!r}] has no JSON Schema: use str, int, float, bool or None")
        return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
    if origin is tuple or hint is tuple:
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "items": schema_of(args[0] if args else Any, defs)}
        return {
            "type": "array",
            "prefixItems": [schema_of(a, defs) for a in args],
            "items": False,
            "minItems": len(args),
        }
    if origin in (list, Sequence) or hint in (list, Sequence):
        return {"type": "array", "items": schema_of(args[0] if args else Any, defs)}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if args and args[0] is not str:
            raise SchemaError(f"{_hint_name(hint)} has no JSON Schema: object keys are strings (use dict[str, ...])")
        return {"type": "object", "additionalProperties": schema_of(args[1] if args else Any, defs)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _named(hint, defs, lambda: {"enum": [_enum_value(hint, m) for m in hint]})
    if _is_typeddict(hint):
        return _named(hint, defs, lambda: _typeddict(hint, defs))
    if _pydantic_dataclass(hint):
        return _pydantic(hint, defs)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _named(hint, defs, lambda: _dataclass(hint, defs))
    if _pydantic_model(hint):
        return _pydantic(hint, defs)
    raise SchemaError(
        f"{_hint_name(hint)} has no exact JSON Schema; tools take and return str, int, float, bool, None, "
        "list, tuple, dict[str, ...], Literal, Optional/Union, Enum, TypedDict, dataclasses and pydantic models"
    )


_WIRE_NAMED: Final[dict[Any, str]] = {bytes: "Uint8Array", datetime.datetime: "Date"}


def _wire_schema(hint: Any, origin: Any, args: tuple[Any, ...], defs: Defs) -> dict[str, Any] | None:
    """What a wire value's hint is where JSON's would differ or be refused; None: as JSON."""
    if hint in _WIRE_NAMED:
        return {WIRE: _WIRE_NAMED[hint]}
    if origin in (set, frozenset) or hint in (set, frozenset):
        return {WIRE: "Set", "items": schema_of(args[0] if args else Any, defs)}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return {"type": "object", "additionalProperties": schema_of(args[1] if len(args) == 2 else Any, defs)}
    if origin in (typing.Union, types.UnionType, typing.Literal, typing.Annotated, tuple, list, Sequence):
        return None
    if hint is tuple or hint is list or hint is Sequence:
        return None
    # Named types arrive as the plain values they are sent as: the guest sees any value.
    return {}


# --- Annotated metadata -----------------------------------------------------------------------

# What each JSON type is in Python, for asking pydantic which keywords metadata adds to it.
_STAND_IN: Final[dict[str, Any]] = {
    "integer": int,
    "number": float,
    "string": str,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": None,
}
_KIND_NAME: Final = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}
# Keywords that describe a value without bounding it: these may sit on any schema.
_ANNOTATIONS: Final = frozenset(
    {"title", "description", "examples", "deprecated", "readOnly", "writeOnly", "$comment", "format"}
)
_KEYWORDS: Final = frozenset(Draft202012Validator.VALIDATORS) | _ANNOTATIONS


def _annotated(base: Any, metadata: tuple[Any, ...], defs: Defs) -> dict[str, Any]:
    """``Annotated[base, ...]``: a str is the description; pydantic's ``Field`` and
    ``annotated_types`` constraints become the keywords pydantic's own generator gives them.
    Other objects are markers for other libraries and say nothing to the schema."""
    schema = schema_of(base, defs)
    text = next((a for a in metadata if isinstance(a, str)), None)
    others = tuple(a for a in metadata if not isinstance(a, str))
    if others:
        schema = {**schema, **_metadata_keywords(base, schema, others)}
    if text and "description" not in schema:
        schema = {**schema, "description": text}
    return schema


def _from_library(item: Any) -> bool:
    return type(item).__module__.split(".")[0] in ("pydantic", "annotated_types")


def _metadata_keywords(base: Any, schema: dict[str, Any], metadata: tuple[Any, ...]) -> dict[str, Any]:
    declared = [m for m in metadata if _from_library(m)]
    if not declared:
        return {}
    try:
        import pydantic
        from pydantic.fields import FieldInfo
    except ImportError:
        raise SchemaError(
            f"Annotated metadata {declared[0]!r} needs pydantic to be stated in the schema (pip install pydantic)"
        ) from None
    extra_keys: set[str] = set()
    for index, item in enumerate(declared):
        if type(item).__module__ == "pydantic.functional_validators":
            # pydantic runs these when it validates; a tool's arguments meet the JSON Schema.
            raise SchemaError(
                f"{type(item).__name__} in Annotated is not run when the tool is called: check the value in the "
                "function, or take a pydantic model, which validates itself"
            )
        if isinstance(item, FieldInfo):
            if not item.is_required():
                raise SchemaError(
                    "a default inside Annotated is not applied to a call: give it as the parameter's (or field's) "
                    "own default, name: Annotated[<type>, Field(...)] = <default>"
                )
            for alias in ("alias", "validation_alias"):
                if getattr(item, alias, None) is not None:
                    raise SchemaError(
                        f"{alias}={getattr(item, alias)!r} in Annotated is not applied to a tool's arguments: "
                        "name the parameter (or field) as the program passes it"
                    )
            if isinstance(item.json_schema_extra, Mapping):
                extra_keys.update(item.json_schema_extra)
            if item.discriminator is not None:
                # Which member to try first: the union's anyOf already checks every member.
                item = copy.copy(item)  # noqa: PLW2901 - the copy stands for the item from here on
                item.discriminator = None
                declared[index] = item
        for part in (item, *getattr(item, "metadata", ())):
            if getattr(part, "allow_inf_nan", None) is True:
                raise SchemaError(
                    "allow_inf_nan=True cannot hold: a tool's numbers are JSON numbers, which have no NaN or "
                    "Infinity, and every numeric schema refuses them; take a str to receive those"
                )
    kind = schema.get("type") if "$ref" not in schema and "anyOf" not in schema else None
    stand_in = _STAND_IN.get(kind, Any) if isinstance(kind, str) else Any
    try:
        annotated: Any = typing.Annotated[(stand_in, *declared)]
        with warnings.catch_warnings():
            # pydantic warns that field-only attributes (deprecated=, ...) have no effect
            # outside a model; here they become the keywords of a parameter's schema.
            field_only = getattr(sys.modules.get("pydantic.warnings"), "UnsupportedFieldAttributeWarning", None)
            if isinstance(field_only, type) and issubclass(field_only, Warning):
                warnings.simplefilter("ignore", field_only)
            plain_schema = pydantic.TypeAdapter(stand_in).json_schema()
            full = pydantic.TypeAdapter(annotated).json_schema()
    except Exception as exc:  # noqa: BLE001 - pydantic's refusal, whatever its class, is the message
        raise SchemaError(f"Annotated metadata {declared!r} has no JSON Schema: {exc}") from None
    keywords = {k: v for k, v in full.items() if plain_schema.get(k, _MISSING) != v}
    for key in keywords:
        if key in _ANNOTATIONS or key in extra_keys or key.startswith("x-"):
            continue
        if stand_in is Any and "anyOf" in schema:
            raise SchemaError(
                "Annotated metadata that bounds a value must be on the union's member it bounds "
                "(e.g. Annotated[int, Field(ge=0)] | None), not on the whole union"
            )
        if key not in _KEYWORDS or stand_in is Any:
            what = _KIND_NAME.get(kind, _hint_name(base)) if isinstance(kind, str) else _hint_name(base)
            raise SchemaError(f"Annotated metadata gives {key!r}, which does not apply to {what}")
    return keywords


_MISSING: Final = object()


def is_pydantic_field(default: Any) -> bool:
    """Whether default is a pydantic ``Field(...)``, which a plain function or dataclass keeps
    as the object itself instead of applying it."""
    module = sys.modules.get("pydantic.fields")
    field_info = getattr(module, "FieldInfo", None)
    return isinstance(field_info, type) and isinstance(default, field_info)


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or repr(hint)


def _enum_value(cls: type[enum.Enum], member: enum.Enum) -> Any:
    value = member.value
    if not isinstance(value, (str, int, float, bool)):
        raise SchemaError(f"enum {cls.__name__}.{member.name} = {value!r} has no JSON value")
    return value


def _named(hint: type, defs: Defs, make: Any) -> dict[str, Any]:
    name = hint.__name__
    if defs.claim(name, hint):
        defs[name] = {}  # a placeholder first: a type that refers to itself stops here
        defs[name] = _described(make(), _class_doc(hint))
    return {"$ref": f"#/$defs/{name}"}


def _class_doc(hint: type) -> str | None:
    import inspect

    doc = inspect.getdoc(hint)
    if not doc or doc == inspect.getdoc(type(hint)) or doc.startswith(f"{hint.__name__}("):
        return None  # dataclasses write their signature as a docstring
    for base in hint.__mro__[1:]:
        if inspect.getdoc(base) == doc:
            return None
    return first_paragraph(doc)


def first_paragraph(doc: str) -> str:
    return " ".join(doc.split("\n\n", maxsplit=1)[0].split())


def _typeddict(hint: Any, defs: Defs) -> dict[str, Any]:
    hints = defs.hints(hint)
    properties = {name: schema_of(_strip_required(h), defs) for name, h in hints.items()}
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    # Read from the resolved hints: under postponed annotations (PEP 563) Python 3.11 builds
    # __required_keys__ from strings and misses NotRequired.
    total = getattr(hint, "__total__", True)
    required = [name for name, h in hints.items() if _required(h, name in hint.__required_keys__, total)]
    if required:
        schema["required"] = required
    return schema


def _required(hint: Any, listed: bool, total: bool) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.NotRequired:
        return False
    if origin is typing.Required:
        return True
    return listed if total else False


def _strip_required(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Required, typing.NotRequired):
        return typing.get_args(hint)[0]
    return hint


def _dataclass(hint: type, defs: Defs) -> dict[str, Any]:
    hints = defs.hints(hint)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in dataclasses.fields(hint):
        if not field.init:
            continue
        if is_pydantic_field(field.default):
            raise SchemaError(
                f"{hint.__name__}.{field.name}: a pydantic Field as a dataclass default is not applied by the "
                f"dataclass; write {field.name}: Annotated[<type>, Field(...)] = <default>"
            )
        schema = schema_of(hints[field.name], defs)
        if field.default is not dataclasses.MISSING:
            schema = with_default(schema, field.default)
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        properties[field.name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = required
    return out


def with_default(schema: dict[str, Any], default: Any) -> dict[str, Any]:
    """schema with its ``default`` where that default has a JSON value."""
    default = plain(default)
    try:
        json.dumps(default, allow_nan=False)
    except (TypeError, ValueError):
        return schema
    return {**schema, "default": default}


def _pydantic(hint: Any, defs: Defs) -> dict[str, Any]:
    name = hint.__name__
    if defs.claim(name, hint):
        if _pydantic_model(hint):
            schema = hint.model_json_schema(ref_template="#/$defs/{model}")
        else:
            import pydantic

            schema = pydantic.TypeAdapter(hint).json_schema(ref_template="#/$defs/{model}")
        # The model's own nested models: pydantic names them the same way.
        for sub_name, sub in schema.pop("$defs", {}).items():
            defs.setdefault(sub_name, sub)
        schema.pop("title", None)
        defs[name] = schema
    return {"$ref": f"#/$defs/{name}"}


# --- Arguments in, results out --------------------------------------------------------------


def build(hint: Any, value: Any, fields: Mapping[Any, dict[str, Any]] | None = None) -> Any:
    """A validated JSON-like value as ``hint`` declares it: dataclasses, models and enums
    built from their plain form, an ``int`` from a whole float (the validator let through
    only those a JavaScript number states exactly; ``-0`` is ``0``), through lists, tuples,
    dicts and unions. ``fields`` holds the field hints the schema resolved (``Defs.fields``),
    for types whose string hints only the tool's maker could resolve."""
    if hint is int and isinstance(value, float):
        return int(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return build(args[0], value, fields)
    if origin is typing.Literal:
        # The declared member itself: -0 (a float on the wire) is the literal 0.
        return next((a for a in args if a == value and isinstance(a, bool) is isinstance(value, bool)), value)
    if origin in (typing.Union, types.UnionType):
        # The member of value's own Python type first: 2.0 stays a float under int | float.
        for member in args:
            if _matches(member, value, exact=True):
                return build(member, value, fields)
        for member in args:
            if _matches(member, value):
                return build(member, value, fields)
        return value
    if isinstance(value, list):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return tuple(build(a, v, fields) for a, v in zip(args, value, strict=False))
        item = args[0] if args else Any
        built = [build(item, v, fields) for v in value]
        return tuple(built) if origin is tuple or hint is tuple else built
    if isinstance(value, dict):
        if origin in (dict, Mapping) and len(args) == 2:
            return {k: build(args[1], v, fields) for k, v in value.items()}
        if _pydantic_dataclass(hint):
            import pydantic

            return pydantic.TypeAdapter(hint).validate_python(value)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            hints = _field_hints(hint, fields)
            return hint(**{k: build(hints.get(k, Any), v, fields) for k, v in value.items()})
        if _is_typeddict(hint):
            hints = _field_hints(hint, fields)
            return {k: build(_strip_required(hints.get(k, Any)), v, fields) for k, v in value.items()}
        if _pydantic_model(hint):
            return hint.model_validate(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    return value


def _field_hints(hint: Any, fields: Mapping[Any, dict[str, Any]] | None) -> dict[str, Any]:
    found = fields.get(hint) if fields is not None else None
    return found if found is not None else type_hints(hint, None)


def _matches(hint: Any, value: Any, *, exact: bool = False) -> bool:
    """Whether value (already valid for the union) is the member ``hint``'s shape; ``exact``:
    for a number, whether the member is its own Python type."""
    if typing.get_origin(hint) is typing.Annotated:
        return _matches(typing.get_args(hint)[0], value, exact=exact)
    if typing.get_origin(hint) is typing.Literal:
        return any(
            a == value and (type(a) is type(value) if exact else isinstance(a, bool) is isinstance(value, bool))
            for a in typing.get_args(hint)
        )
    origin = typing.get_origin(hint) or hint
    if value is None:
        return hint in (None, type(None))
    if isinstance(value, bool):
        return origin is bool
    if isinstance(value, (int, float)):
        if exact:
            return origin is type(value)
        if origin is int:
            return isinstance(value, int) or value.is_integer()
        return origin is float or (isinstance(origin, type) and issubclass(origin, enum.Enum))
    if isinstance(value, str):
        return (
            origin is str
            or typing.get_origin(hint) is typing.Literal
            or (isinstance(origin, type) and issubclass(origin, enum.Enum))
        )
    if isinstance(value, list):
        return origin in (list, tuple, Sequence)
    if isinstance(value, dict):
        return (
            origin in (dict, Mapping) or _is_typeddict(hint) or dataclasses.is_dataclass(hint) or _pydantic_model(hint)
        )
    return False


_AS_IS: Final = frozenset({str, int, float, bool, type(None), bytes})


def plain(value: Any) -> Any:
    """What a tool returned, with dataclasses, pydantic models and enums as plain values (and
    tuples as lists). Containers that hold none are returned as they are, not copied: a tool's
    large plain result costs one walk over it."""
    kind = type(value)
    if kind in _AS_IS:
        return value
    if kind is list:
        out: list[Any] | None = None
        for i, item in enumerate(value):
            if type(item) in _AS_IS:
                continue
            converted = plain(item)
            if converted is not item:
                if out is None:
                    out = list(value)
                out[i] = converted
        return value if out is None else out
    if kind is dict:
        changed: dict[Any, Any] | None = None
        for key, item in value.items():
            if type(item) in _AS_IS:
                continue
            converted = plain(item)
            if converted is not item:
                if changed is None:
                    changed = dict(value)
                changed[key] = converted
        return value if changed is None else changed
    if kind is tuple:
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if _pydantic_model(kind):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return plain(list(value))
    if isinstance(value, dict):
        return plain(dict(value))
    return value
