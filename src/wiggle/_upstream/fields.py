"""Typed reads of upstream definition JSON, each error naming where it is and which field.

Upstream definitions arrive as a ``google.protobuf.Struct``, where every number is a double: an
integer field may come as ``3`` or ``3.0``, so integer reads accept any integral number. A JSON
null reads as an absent field (upstream's own reader treats both alike).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgument

__all__ = ["Fields", "json_type"]


def json_type(value: object) -> str:
    """The JSON name of ``value``'s type, with an article: "a string", "a list", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Fields:
    """One JSON object of an upstream definition, and the words that say where it is."""

    __slots__ = ("data", "where")

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise InvalidArgument(f"{where} must be a JSON object, got {json_type(data)}")
        self.data: dict[str, Any] = data
        self.where = where

    def has(self, key: str) -> bool:
        """True if ``key`` is present and not null."""
        return self.data.get(key) is not None

    def _bad(self, key: str, want: str, value: object) -> InvalidArgument:
        shown = json_type(value) if isinstance(value, (dict, list, tuple)) else repr(value)
        return InvalidArgument(f"{self.where}: {key!r} must be {want}, got {shown}")

    def text(self, key: str, required: bool = False, what: str = "") -> str | None:
        """A string field; a missing required one names ``what`` it is for."""
        value = self.data.get(key)
        if value is None:
            if required:
                suffix = f" ({what})" if what else ""
                raise InvalidArgument(f"{self.where}: {key!r} is missing{suffix}")
            return None
        if not isinstance(value, str):
            raise self._bad(key, "a string", value)
        return value

    def required_text(self, key: str, what: str = "") -> str:
        """A string field that must be present."""
        value = self.text(key, required=True, what=what)
        assert value is not None
        return value

    def integer(self, key: str, default: int) -> int:
        """An integer field (``3.0`` reads as 3); ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool):
            raise self._bad(key, "an integer", value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise self._bad(key, "an integer", value)

    def number(self, key: str, default: float) -> float:
        """A finite number field; ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._bad(key, "a finite number", value)
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        """A boolean field; ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def texts(self, key: str) -> list[str]:
        """A list of strings; empty when absent."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            raise self._bad(key, "a list of strings", value)
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise InvalidArgument(f"{self.where}: {key}[{i}] must be a string, got {json_type(item)}")
        return list(value)

    def items(self, key: str) -> list[Any]:
        """A list field that must be present."""
        value = self.data.get(key)
        if value is None:
            raise InvalidArgument(f"{self.where}: {key!r} is missing")
        if not isinstance(value, (list, tuple)):
            raise self._bad(key, "a list", value)
        return list(value)

    def child(self, key: str, where: str) -> Fields | None:
        """A nested object, or None when absent."""
        value = self.data.get(key)
        if value is None:
            return None
        return Fields(value, where)
