"""Argument checks shared by every public constructor: a bad value raises TypeError or
ValueError that names the argument, what it must be, and what it got.

Also what the public classes share for misuse of their protocol: ``with`` on an async-only
class, ``async with`` on a sync one (:class:`NeedsAsyncWith`, :class:`NeedsWith`), and the
human form of a byte count that hints and notes give beside the exact one.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

if TYPE_CHECKING:
    from fractions import Fraction

__all__ = [
    "SIZE_FORMS",
    "Lang",
    "NeedsAsyncWith",
    "NeedsWith",
    "SizeError",
    "bytes_text",
    "code_text",
    "count",
    "human_bytes",
    "is_typescript",
    "limit_text",
    "module_specifier",
    "optional_count",
    "optional_seconds",
    "optional_size",
    "parse_size",
    "seconds",
    "size",
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


# -- sizes ----------------------------------------------------------------------------------
# Every unit is a power of 1024, whichever way it is spelt (K, KB and KiB are all 2**10): the
# command line has always read them so, and one rule is easier to keep than two.
_SIZE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(?:([kmg])(?:i?b)?)?", re.IGNORECASE)
_UNITS: Final = {"k": 2**10, "m": 2**20, "g": 2**30}
SIZE_FORMS: Final = (
    "a whole number of bytes (268435456), or a number with K, M or G, each a power of 1024 however it is "
    "written (K, KB and KiB are all 1024: 256M, 1.5G, 512KiB)"
)


class SizeError(ValueError):
    """A size as text that is not one (``exact`` None), or that is not a whole number of
    bytes (``exact`` what it came to): never rounded."""

    def __init__(self, text: str, exact: Fraction | None = None) -> None:
        self.text = text
        self.exact = exact
        super().__init__(f"{text!r} {self.explain()}")

    def explain(self, name: str = "") -> str:
        """What is wrong and what to give instead; ``name`` is the option's, if it has one."""
        given = f"{name}=" if name else ""
        if self.exact is None:
            example = f"; for example {name}='256M'" if name else ""
            return f"is not a size: give {SIZE_FORMS}{example}"
        return (
            f"is {_decimal(self.exact)} bytes, not a whole number of bytes: give {given}{math.floor(self.exact)} "
            "(or another whole number of bytes)"
        )


def parse_size(text: str) -> int:
    """A size as text in bytes: ``"268435456"``, ``"256M"``, ``"256MB"``, ``"256MiB"``,
    ``"1.5G"``, ``"512K"`` (case and the space before the unit do not matter). A string that
    is not a size, or is not a whole number of bytes (``"1.3M"``), raises :class:`SizeError`
    (a ValueError): it is never rounded."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise SizeError(text)
    number, unit = found.groups()
    from fractions import Fraction  # sizes given as text only: not with the package

    exact = Fraction(number) * (_UNITS[unit.lower()] if unit else 1)
    if exact.denominator != 1:
        raise SizeError(text, exact)
    return int(exact)


def _decimal(value: Fraction) -> str:
    # A decimal number times a power of two has a finite decimal expansion: show all of it.
    whole, rest = divmod(value.numerator, value.denominator)
    digits = ""
    while rest and len(digits) < 30:
        whole_digit, rest = divmod(rest * 10, value.denominator)
        digits += str(whole_digit)
    return f"{whole}.{digits}" if digits else str(whole)


def optional_size(name: str, value: Any, minimum: int) -> int | None:
    """A number of bytes (an int, or a size as text: :func:`parse_size`) of at least
    ``minimum``, or None."""
    return None if value is None else _size(name, value, minimum, " or None")


def size(name: str, value: Any, minimum: int) -> int:
    """A number of bytes (an int, or a size as text: :func:`parse_size`) of at least ``minimum``."""
    return _size(name, value, minimum, "")


def _size(name: str, value: Any, minimum: int, alternative: str) -> int:
    if isinstance(value, str):
        try:
            value = parse_size(value)
        except SizeError as exc:
            raise ValueError(f"{name}={value!r} {exc.explain(name)}") from None
    elif isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{name} must be an int of bytes or a size as a str (268435456, '256M', '1.5G'){alternative}, "
            f"got {type(value).__name__}"
        )
    number = int(value)
    if number < minimum:
        raise ValueError(f"{name} must be at least {bytes_text(minimum)}, got {bytes_text(number)}")
    return number


_BINARY: Final = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_bytes(n: int) -> str:
    """A byte count in the largest binary unit it reaches: ``512 MiB``, ``1.5 GiB`` and
    ``1.125 MiB`` are exact; anything else is rounded to three figures and says so
    (``about 1.23 MiB``). Under 1 KiB it is ``N bytes``."""
    for index, (unit, scale) in enumerate(_BINARY):
        if abs(n) < scale:
            continue
        # Up to three decimals is exact for eighths of a unit; finer is rounded.
        if (n * 1000) % scale == 0:
            return f"{_trimmed(f'{n / scale:.3f}')} {unit}"
        value = n / scale
        shown = _trimmed(f"{value:.{max(0, 2 - int(math.log10(abs(value))))}f}")
        if float(shown) >= 1024 and index > 0:
            # Rounded up to a whole unit more: read it in the next unit instead.
            larger, factor = _BINARY[index - 1]
            return f"about {_trimmed(f'{n / factor:.2f}')} {larger}"
        return f"about {shown} {unit}"
    return f"{n} bytes"


def _trimmed(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number


def bytes_text(n: int) -> str:
    """A byte count as an argument's refusal gives it: exact, then in binary units from 1 KiB
    on (``536870912 (512 MiB)``); under 1 KiB the number alone."""
    return f"{n} ({human_bytes(n)})" if abs(n) >= 1024 else str(n)


def limit_text(n: int) -> str:
    """A limit's current value in a hint, ``now 536870912 = 512 MiB``: as it is passed, and as
    a person reads it."""
    return f"{n} = {human_bytes(n)}" if abs(n) >= 1024 else str(n)


# -- with and async with ----------------------------------------------------------------------
def _public_path(cls: type) -> tuple[str, str]:
    """Where a user imports cls from: ``pydeno.AsyncRuntime``, ``pydeno.ray.RayPool``."""
    public = next((c for c in cls.__mro__ if not c.__name__.startswith("_")), cls)
    # The module parts before the first private one: pydeno._agents.sessions._async is pydeno.
    parts = public.__module__.split(".")
    module = ".".join(parts[: next((i for i, part in enumerate(parts) if part.startswith("_")), len(parts))])
    return f"{module}.{public.__name__}", public.__name__


def _twin(path: str, name: str) -> str | None:
    """The other flavour of a class exported by pydeno, if it has one."""
    # Imported only once the misuse happens: every public module imports this one.
    import pydeno

    other = name.removeprefix("Async") if name.startswith("Async") else f"Async{name}"
    return f"pydeno.{other}" if path == f"pydeno.{name}" and hasattr(pydeno, other) else None


class NeedsAsyncWith:
    """For an async-only class: ``with`` on it says to write ``async with`` (or to use the
    sync twin) instead of Python's generic protocol error."""

    __slots__ = ()

    def __enter__(self) -> NoReturn:
        path, name = _public_path(type(self))
        twin = _twin(path, name)
        advice = f'{name} is async: use "async with {path}(...)" in async code'
        raise TypeError(f'{advice}, or "with {twin}(...)" in sync code' if twin else advice)

    def __exit__(self, *exc_info: object) -> None:
        return None  # never reached: __enter__ raises


class NeedsWith:
    """For a sync class: ``async with`` on it says to write ``with`` (or to use the async
    twin) instead of Python's generic protocol error."""

    __slots__ = ()

    async def __aenter__(self) -> NoReturn:
        path, name = _public_path(type(self))
        twin = _twin(path, name)
        advice = f'{name} is sync: use "with {path}(...)"'
        raise TypeError(f'{advice}, or "async with {twin}(...)" in async code' if twin else advice)

    async def __aexit__(self, *exc_info: object) -> None:
        return None  # never reached: __aenter__ raises


def code_text(code: Any) -> str:
    """Guest code: a str."""
    if not isinstance(code, str):
        raise TypeError(f"code must be a str of JavaScript, got {type(code).__name__}")
    return code


Lang = Literal["js", "javascript", "ts", "typescript"]
# lang='s usual names, in any case ("TS", "TypeScript"): what each asks for.
_LANGS: Final = {"js": False, "javascript": False, "ts": True, "typescript": True}
_LANG_NAMES: Final = '"js", "javascript", "ts" or "typescript"'


def is_typescript(lang: Any) -> bool:
    """Whether lang= asks for TypeScript; refuses anything but the names in _LANGS."""
    if not isinstance(lang, str):
        raise TypeError(f"lang must be a str, one of {_LANG_NAMES}, got {lang!r}")
    typescript = _LANGS.get(lang.lower())
    if typescript is None:
        raise ValueError(f"lang must be {_LANG_NAMES} (in any case), got {lang!r}")
    return typescript


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
