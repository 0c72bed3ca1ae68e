"""Argument checks shared by every public constructor: a bad value raises TypeError or
ValueError that names the argument, what it must be, and what it got."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

__all__ = [
    "Lang",
    "code_text",
    "count",
    "is_typescript",
    "module_specifier",
    "optional_count",
    "optional_seconds",
    "seconds",
    "source_text",
]


def optional_seconds(name: str, value: Any) -> float | None:
    """A positive, finite number of seconds, or None."""
    return None if value is None else _seconds(name, value, " or None")


def seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds."""
    return _seconds(name, value, "")


def _seconds(name: str, value: Any, alternative: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds{alternative}, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def optional_count(name: str, value: Any, minimum: int | None) -> int | None:
    """An int of at least ``minimum`` (any int for None), or None."""
    return None if value is None else _count(name, value, minimum, " or None")


def count(name: str, value: Any, minimum: int) -> int:
    """An int of at least ``minimum``."""
    return _count(name, value, minimum, "")


def _count(name: str, value: Any, minimum: int | None, alternative: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{alternative}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def code_text(code: Any) -> str:
    """Guest code: a str."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of JavaScript, got {type(code).__name__}")
    return code


Lang = Literal["js", "ts"]


def is_typescript(lang: Any) -> bool:
    """Whether lang= asks for TypeScript; refuses anything but "js" and "ts"."""
    if lang == "ts" and isinstance(lang, str):
        return True
    if lang == "js" and isinstance(lang, str):
        return False
    raise ValueError(f'lang must be "js" or "ts", got {lang!r}')


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def module_specifier(specifier: Any) -> str:
    """A name the guest imports an added module by: a bare name or a path, not a URL."""
    if not isinstance(specifier, str):
        raise TypeError(f"a module specifier must be a str, got {type(specifier).__name__}")
    if not specifier or specifier != specifier.strip() or "\n" in specifier:
        raise ValueError(f"a module specifier must be a non-empty name without surrounding spaces, got {specifier!r}")
    if _SCHEME.match(specifier):
        raise ValueError(f"a module specifier is a name like 'utils' or './utils.ts', not a URL: got {specifier!r}")
    return specifier


def source_text(source: Any) -> str:
    if not isinstance(source, str):
        raise TypeError(f"a module's source must be a str, got {type(source).__name__}")
    return source
