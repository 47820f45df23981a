"""The JSON fields of requests: object check, size limit, nesting limit, the field named.

Every JSON field that arrives over the wire (start context, step results, user-task payloads,
AdvanceRun batches, definitions) passes ``check_depth`` before a decoder sees it: msgspec
recurses once per level, so a document nested thousands of levels deep would otherwise end in a
RecursionError and an INTERNAL status instead of INVALID_ARGUMENT (issue #14).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import msgspec

from ..errors import InvalidArgument

__all__ = ["MAX_JSON_DEPTH", "check_depth", "decode_object"]

#: The deepest nesting of arrays and objects a JSON field may have. Far above any real context,
#: far below the depth at which the decoder runs out of stack (about 1,000 levels).
MAX_JSON_DEPTH = 256

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def check_depth(data: bytes, what: str) -> None:
    """Raise InvalidArgument naming ``what`` and the limit if ``data`` nests deeper than allowed."""
    opening = data.count(b"[") + data.count(b"{")
    if opening <= MAX_JSON_DEPTH:  # the common case: too few brackets to nest that deep
        return
    # Brackets inside strings do not nest; drop the strings, keep the brackets, walk the depth.
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    depth = max(itertools.accumulate(_STEP[b] for b in brackets), default=0)
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(
            f"{what} nests {depth} levels deep; the nesting limit is {MAX_JSON_DEPTH} levels"
        )


def decode_object(data: bytes, what: str, max_bytes: int | None) -> dict[str, Any]:
    """Decode JSON bytes that must hold an object; empty bytes mean {}.

    ``max_bytes`` is the payload limit (EngineConfig.max_payload_bytes), or None where the engine
    checks the size of the decoded value itself (step results).
    """
    if not data:
        return {}
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidArgument(f"{what} is {len(data)} bytes; the limit is {max_bytes} bytes")
    check_depth(data, what)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(value).__name__}")
    return value
