"""Text a caller chose, on its way to the history and the server's log.

A name a caller gives for itself (a signal's ``sender``, a retry's ``requested_by``, the
dashboard's ``actor``) is one line of printable text: ``check_name`` refuses a control character
(a line break, an escape sequence, a bidirectional override) with INVALID_ARGUMENT naming the
field. Free text (a cancel's reason, a request path, a worker's error message) is kept as given,
and ``loggable`` escapes it wherever it is logged: written raw, a newline in it would start a
line of the caller's making in the log, which a reader (or a log shipper) takes for the
server's own (docs/security.md#secrets-stay-secret).
"""

from __future__ import annotations

import unicodedata

from ..errors import InvalidArgument

__all__ = ["loggable", "check_name", "first_unprintable"]

#: the Unicode categories a log line must not carry raw: controls (Cc: newline, ESC...), format
#: characters (Cf: bidirectional overrides, zero-width joiners), surrogates, private use and
#: unassigned code points, and the line and paragraph separators (U+2028, U+2029)
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in _UNSAFE


def first_unprintable(text: str) -> int:
    """The index of the first character ``loggable`` would escape, or -1 for none."""
    if text.isprintable():  # the common case, in C; it is False for every unsafe character
        return -1
    for i, char in enumerate(text):
        if _unsafe(char):
            return i
    return -1  # only spaces other than U+0020 (which isprintable refuses): harmless in a line


def _escape(char: str) -> str:
    code = ord(char)
    if char in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def loggable(text: str, limit: int = 0) -> str:
    """``text`` as one log line can hold it: each control, format or separator character written
    as its escape (``\\n``, ``\\x1b``, ``\\u202e``), everything else as it is; cut to ``limit``
    characters first (0: whole), with "..." to say so."""
    if limit and len(text) > limit:
        text = text[:limit] + "..."
    if first_unprintable(text) < 0:
        return text
    return "".join(_escape(c) if _unsafe(c) else c for c in text)


def check_name(value: str, field: str, limit: int) -> None:
    """InvalidArgument unless ``value`` (a name a caller gives, ``field``) has at most ``limit``
    characters and no control, format or separator character: a name is one line of printable
    text, recorded in the history and the log as given."""
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} characters; the limit is {limit}")
    at = first_unprintable(value)
    if at >= 0:
        raise InvalidArgument(
            f"{field} '{loggable(value, 60)}' contains the control character U+{ord(value[at]):04X} "
            f"at position {at}; a name is one line of printable text (it is recorded in the history "
            "and the server's log)"
        )
