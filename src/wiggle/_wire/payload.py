"""The JSON fields of requests: object check, size limit, nesting limit, the field named.

Every JSON field that arrives over the wire (start context, step results, user-task payloads,
AdvanceRun batches, definitions) passes ``check_depth`` before a decoder sees it: msgspec
recurses once per level, so a document nested thousands of levels deep would otherwise end in a
RecursionError and an INTERNAL status instead of INVALID_ARGUMENT (issue #14).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .._limits import over_payload
from ..errors import InvalidArgument

__all__ = ["MAX_JSON_DEPTH", "check_depth", "decode_object", "too_deep"]

#: The deepest nesting of arrays and objects a JSON field may have. Far above any real context,
#: far below the depth at which the decoder runs out of stack (about 1,000 levels).
MAX_JSON_DEPTH = 256

_ESCAPE = re.compile(rb"\\.", re.DOTALL)  # a backslash and the character it escapes
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")
_AS_PARENS = bytes.maketrans(b"[{]}", b"(())")
_TOO_DEEP_RUN = b"(" * (MAX_JSON_DEPTH + 1)


def check_depth(data: bytes, what: str) -> None:
    """Raise InvalidArgument naming ``what`` and the limit if ``data`` nests deeper than allowed.

    Malformed JSON may pass; the decoder then rejects it (and ``decode_object`` also turns a
    RecursionError into the same error, for brackets that never close).
    """
    if len(data) <= MAX_JSON_DEPTH or data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return  # too few brackets to nest that deep
    # Brackets inside strings do not nest: drop escapes, then every other quote-delimited part.
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    outside = b"".join(data.split(b'"')[::2])
    nesting = outside.translate(_AS_PARENS, _NOT_BRACKET)
    if _TOO_DEEP_RUN in nesting:  # the usual attack, found in one search
        raise too_deep(what)
    # Each pass removes the innermost pairs, so the tree loses one level per pass: a document
    # within the limit is gone after MAX_JSON_DEPTH passes. All in C; no per-bracket Python loop.
    for _ in range(MAX_JSON_DEPTH):
        shorter = nesting.replace(b"()", b"")
        if len(shorter) == len(nesting):
            return  # empty, or unbalanced (the decoder's to refuse)
        nesting = shorter
    if b"()" in nesting:
        raise too_deep(what)


def too_deep(what: str) -> InvalidArgument:
    """The error for a document deeper than MAX_JSON_DEPTH."""
    return InvalidArgument(
        f"{what} nests more than {MAX_JSON_DEPTH} levels deep; the nesting limit is {MAX_JSON_DEPTH} levels"
    )


def decode_object(data: bytes, what: str, max_bytes: int | None) -> dict[str, Any]:
    """Decode JSON bytes that must hold an object; empty bytes mean {}.

    ``max_bytes`` is the payload limit (EngineConfig.max_payload_bytes), or None where the engine
    checks the size of the decoded value itself (step results).
    """
    if not data:
        return {}
    if max_bytes is not None and len(data) > max_bytes:
        raise InvalidArgument(over_payload(what, len(data), max_bytes))
    if len(data) > MAX_JSON_DEPTH:  # shorter cannot nest too deep (check_depth's first test)
        check_depth(data, what)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise too_deep(what) from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(value).__name__}")
    return value
