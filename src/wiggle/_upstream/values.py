"""``google.protobuf.Value`` / ``Struct`` to and from plain Python (upstream's context encoding).

Upstream sends contexts, step results and definitions as protobuf Values, where every number is
a double. Reading, a number that is a whole number within +-2**53 becomes an ``int`` (so
``3.0`` reads back as ``3``), any other finite number a ``float``; NaN and infinities are refused,
since a context is JSON and JSON has neither. Writing, an ``int`` a double cannot hold exactly is
refused rather than silently rounded. These run once per step: plain loops, no JSON round trip.
"""

from __future__ import annotations

from math import isfinite
from typing import Any

from google.protobuf import struct_pb2

from ..errors import InvalidArgument

__all__ = [
    "from_value",
    "to_value",
    "readable",
    "struct_to_dict",
    "dict_to_struct",
    "context_from_value",
    "diff_from_value",
]

_EXACT = 2**53  # every integer of magnitude up to this is a double exactly
_KIND_NAMES = {
    "null_value": "null",
    "number_value": "a number",
    "string_value": "a string",
    "bool_value": "a boolean",
    "struct_value": "an object",
    "list_value": "a list",
}


class _Bad(Exception):
    """A value that cannot cross; ``path`` grows (innermost first) as it unwinds."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []

    def error(self, what: str) -> InvalidArgument:
        where = "".join(reversed(self.path))
        at = f" at {what}{where}" if where else f" in {what}"
        return InvalidArgument(f"{self.problem}{at}")


def _key(key: str) -> str:
    return f"[{key!r}]"


# ---------------------------------------------------------------------------- protobuf -> Python


def from_value(value: struct_pb2.Value, what: str = "the value") -> Any:
    """A Value as plain Python; InvalidArgument (naming ``what`` and the path) for NaN/infinity."""
    try:
        return _read(value)
    except _Bad as bad:
        raise bad.error(what) from None
    except RecursionError:
        raise InvalidArgument(f"{what} is nested too deeply") from None


def struct_to_dict(struct: struct_pb2.Struct, what: str = "the object") -> dict[str, Any]:
    """A Struct as a dict."""
    try:
        return _read_struct(struct)
    except _Bad as bad:
        raise bad.error(what) from None
    except RecursionError:
        raise InvalidArgument(f"{what} is nested too deeply") from None


def context_from_value(value: struct_pb2.Value) -> dict[str, Any]:
    """A context sent as a Value: an object, or null / unset for the empty context."""
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return {}
    if kind != "struct_value":
        raise InvalidArgument(f"context must be a JSON object, got {_KIND_NAMES[kind]}")
    return struct_to_dict(value.struct_value, "the context")


def diff_from_value(value: struct_pb2.Value | None) -> tuple[dict[str, Any], list[str]]:
    """Upstream's step result: ``(changed, removed)``.

    The result is a shallow diff: each key set to its new value, a key set to null removed. A
    null, unset or missing result changes nothing. Anything but an object or null is refused.
    """
    if value is None:
        return {}, []
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return {}, []
    if kind != "struct_value":
        raise InvalidArgument(
            f"a step's result must be a JSON object (the keys it changed) or null, got {_KIND_NAMES[kind]}"
        )
    changed: dict[str, Any] = {}
    removed: list[str] = []
    try:
        for key, item in value.struct_value.fields.items():
            which = item.WhichOneof("kind")
            if which is None or which == "null_value":
                removed.append(key)
            else:
                try:
                    changed[key] = _read(item)
                except _Bad as bad:
                    bad.path.append(_key(key))
                    raise
    except _Bad as bad:
        raise bad.error("the step's result") from None
    except RecursionError:
        raise InvalidArgument("the step's result is nested too deeply") from None
    return changed, removed


def _read(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        n = value.number_value
        if n.is_integer():
            return int(n) if -_EXACT <= n <= _EXACT else n
        if not isfinite(n):
            raise _Bad(f"{n} is not a JSON number")
        return n
    if kind == "struct_value":
        return _read_struct(value.struct_value)
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        out = []
        for i, item in enumerate(value.list_value.values):
            try:
                out.append(_read(item))
            except _Bad as bad:
                bad.path.append(f"[{i}]")
                raise
        return out
    return None  # null_value, or a Value with nothing set


def _read_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    out = {}
    for key, item in struct.fields.items():
        try:
            out[key] = _read(item)
        except _Bad as bad:
            bad.path.append(_key(key))
            raise
    return out


# ---------------------------------------------------------------------------- Python -> protobuf


def to_value(obj: Any, what: str = "the value") -> struct_pb2.Value:
    """A JSON-shaped Python value as a Value; InvalidArgument names what cannot be sent."""
    value = struct_pb2.Value()
    try:
        _write(value, obj)
    except _Bad as bad:
        raise bad.error(what) from None
    except RecursionError:
        raise InvalidArgument(f"{what} is nested too deeply") from None
    return value


def readable(obj: Any) -> Any:
    """``obj`` with every integer a double cannot hold exactly as its decimal text, for answers
    that only show a value (GetInstance, ListInstances): a read never fails on one, and never
    rounds it. The rest is left as it is (a copy only where something changed)."""
    t = type(obj)
    if t is dict:
        return {k: readable(v) for k, v in obj.items()}
    if t is list or t is tuple:
        return [readable(v) for v in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and not -_EXACT <= obj <= _EXACT:
        try:
            exact = float(obj) == obj
        except OverflowError:
            exact = False
        return obj if exact else str(int(obj))
    return obj


def dict_to_struct(obj: dict[str, Any], what: str = "the object") -> struct_pb2.Struct:
    """A dict as a Struct."""
    if not isinstance(obj, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(obj).__name__}")
    struct = struct_pb2.Struct()
    try:
        _write_struct(struct, obj)
    except _Bad as bad:
        raise bad.error(what) from None
    except RecursionError:
        raise InvalidArgument(f"{what} is nested too deeply") from None
    return struct


def _write(value: struct_pb2.Value, obj: Any) -> None:
    t = type(obj)
    if t is str:
        value.string_value = obj
    elif t is dict:
        struct = value.struct_value
        struct.SetInParent()  # an empty object is still an object
        _write_struct(struct, obj)
    elif t is int:
        _write_int(value, obj)
    elif t is float:
        if not isfinite(obj):
            raise _Bad(f"{obj} is not a JSON number")
        value.number_value = obj
    elif t is bool:
        value.bool_value = obj
    elif obj is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif t is list or t is tuple:
        values = value.list_value
        values.SetInParent()
        _write_list(values, obj)
    else:
        _write_other(value, obj)


def _write_int(value: struct_pb2.Value, obj: int) -> None:
    if -_EXACT <= obj <= _EXACT:
        value.number_value = obj
        return
    try:
        as_double = float(obj)
    except OverflowError:
        as_double = float("inf")
    if as_double != obj:
        raise _Bad(
            f"the integer {obj} has no exact JSON number (a double holds integers up to 2**53 exactly)"
        )
    value.number_value = as_double


def _write_struct(struct: struct_pb2.Struct, obj: dict[Any, Any]) -> None:
    fields = struct.fields
    for key, item in obj.items():
        if not isinstance(key, str):
            raise _Bad(f"the key {key!r} is not a string")
        try:
            _write(fields[key], item)
        except _Bad as bad:
            bad.path.append(_key(key))
            raise


def _write_list(values: struct_pb2.ListValue, obj: list[Any] | tuple[Any, ...]) -> None:
    for i, item in enumerate(obj):
        try:
            _write(values.values.add(), item)
        except _Bad as bad:
            bad.path.append(f"[{i}]")
            raise


def _write_other(value: struct_pb2.Value, obj: Any) -> None:
    """Subclasses of the JSON types (an IntEnum, a str Enum, an OrderedDict...) take the slow path."""
    if isinstance(obj, bool):
        value.bool_value = bool(obj)
    elif isinstance(obj, int):
        _write_int(value, int(obj))
    elif isinstance(obj, float):
        _write(value, float(obj))
    elif isinstance(obj, str):
        value.string_value = str.__str__(obj)  # the text itself, not an Enum's "Name.A"
    elif isinstance(obj, dict):
        _write(value, dict(obj))
    elif isinstance(obj, (list, tuple)):
        _write(value, list(obj))
    else:
        raise _Bad(f"a {type(obj).__name__} is not a JSON value")
