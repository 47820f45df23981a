"""The one thing JSON cannot hold that a Python float can: NaN and the infinities.

msgspec writes ``float('nan')``, ``inf`` and ``-inf`` as ``null``, so a context, a step's result,
a signal's data or a user task's payload holding one would be stored changed, silently: the next
step would read ``None`` where the handler left a number. The client refuses such a value before it
sends anything (InvalidArgument), and a worker fails the step that returned it for good (a retry
would compute the same value), each naming where the value is (``non_finite``).

The check costs nothing on the common path: such a value encodes to ``null``, so only encoded
JSON that contains ``null`` at all is walked (``non_finite_in``).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import uuid
from typing import Any

import msgspec

__all__ = ["non_finite", "non_finite_in", "described", "foreign", "described_foreign"]

_NULL = b"null"


def non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """Where in ``value`` (builtins: dicts, lists, tuples, scalars) the first NaN or infinity is,
    as a subscript path (``['prices'][2]``, ``""`` for the value itself), and the float; or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, float(value))
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{path}[{key!r}]")
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = non_finite(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def non_finite_in(encoded: bytes, value: Any) -> tuple[str, float] | None:
    """``non_finite`` of ``value`` whose JSON is ``encoded``: walked only if that JSON has a null
    (a NaN or an infinity is written as one), Structs and other types as msgspec sees them."""
    if _NULL not in encoded:
        return None
    return non_finite(msgspec.to_builtins(value))


def described(what: str, found: tuple[str, float]) -> str:
    """The message for a non-finite number found in ``what`` (e.g. "the context")."""
    path, number = found
    where = f"{what}{path}" if path else what
    return (
        f"{where} is {number!r}: JSON has no NaN or infinity and would store it as null "
        "(store None, a string, or a finite number instead)"
    )


# ---------------------------------------------------------------------------- other types

_PLAIN = (str, int, float, bool, type(None))

#: What to do instead with a value of a type msgspec writes as another (its nearest class here).
_INSTEAD: dict[type, str] = {
    datetime.datetime: "store .isoformat() and parse it back",
    datetime.date: "store .isoformat() and parse it back",
    datetime.time: "store .isoformat() and parse it back",
    datetime.timedelta: "store .total_seconds()",
    decimal.Decimal: "store str(value) or a float",
    uuid.UUID: "store str(value)",
    set: "store a list (sorted(value))",
    frozenset: "store a list (sorted(value))",
    bytes: "store text, or base64 of it",
    bytearray: "store text, or base64 of it",
    memoryview: "store text, or base64 of it",
}


def foreign(value: Any, path: str = "") -> tuple[str, str] | None:
    """Where in ``value`` the first value JSON cannot hold *as itself* is, as a subscript path,
    and what it is; or None.

    msgspec writes many Python types as something else (a datetime, a Decimal or a UUID as a
    string, a set as a list, bytes as base64, a dict's int keys as strings), so a context holding
    one would be read back changed, silently: the next step would find ``'2024-01-01T12:00:00'``
    where the handler left a datetime. Held as themselves: str, int, float, bool, None (and their
    subclasses, such as IntEnum and StrEnum, read back as the plain type), lists, tuples (read back
    as lists), dicts with str keys, and msgspec Structs (a typed context's own fields are its
    type's business: a Struct-typed workflow decodes them back)."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                return path, (
                    f"a dict with the {type(key).__name__} key {key!r}: JSON keys are strings, the next "
                    "step would read the key as one (store str(key))"
                )
            if type(item) in _PLAIN:
                continue
            found = foreign(item, f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            if type(item) in _PLAIN:
                continue
            found = foreign(item, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if value is None or isinstance(value, (str, int, float, msgspec.Struct)):  # bool is an int
        return None
    if isinstance(value, (tuple, dict)):  # a NamedTuple, a dict subclass: as their base types
        return foreign(tuple(value) if isinstance(value, tuple) else dict(value), path)
    if isinstance(value, enum.Enum):
        instead = "store its .value"
    elif dataclasses.is_dataclass(value):
        instead = "store dataclasses.asdict(value), or make it a msgspec Struct"
    else:
        instead = next((_INSTEAD[c] for c in kind.__mro__ if c in _INSTEAD), "")
        if not instead:  # a type msgspec cannot encode at all: the encoder's own error names it
            return None
    return (
        path,
        f"of type {kind.__name__}, which JSON holds only as another type: the next step would read that "
        f"({instead})",
    )


def described_foreign(what: str, found: tuple[str, str]) -> str:
    """The message for a value of another type found in ``what`` (e.g. "the context")."""
    path, description = found
    where = f"{what}{path}" if path else what
    return f"{where} is {description}"
