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

import math
from typing import Any

import msgspec

__all__ = ["non_finite", "non_finite_in", "described"]

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
