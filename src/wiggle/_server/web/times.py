"""Times as the dashboard takes and shows them: a filter's time written as a person would, and a
timestamp as UTC text (the page's script shows it in the browser's zone on request).

A time filter takes milliseconds since the epoch (what the API answers carry), an ISO 8601 date
and time (``2026-12-02 14:30``, ``2026-12-02T14:30:00+01:00``; without an offset: UTC; the
page's script adds the browser's offset in local mode), or a time ago (``15m``, ``2h``, ``3d``,
``90s``, optionally followed by ``ago``).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from ...errors import InvalidArgument

__all__ = ["time_arg", "utc_text", "iso"]

_AGO = re.compile(r"(\d{1,9})\s*(s|m|h|d)(?:\s+ago)?", re.IGNORECASE)
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: The last millisecond of 9999-12-31 UTC: the latest time ``iso`` and ``utc_text`` can show back
#: (Python's datetime ends at year 9999), so the latest a time filter may name.
LATEST_MS = 253_402_300_799_999


def _in_range(ms: int, raw: str, name: str) -> int:
    if not 0 <= ms <= LATEST_MS:
        raise InvalidArgument(
            f"{name} must be from 1970-01-01 to 9999-12-31 UTC (0 to {LATEST_MS} milliseconds since "
            f"the epoch), got {raw[:60]!r}"
        )
    return ms


def time_arg(raw: str, name: str, now: int) -> int:
    """A time filter's value in ms since the epoch (0: none); InvalidArgument says what is accepted."""
    raw = raw.strip()
    if not raw:
        return 0
    if raw.isdigit():
        return _in_range(int(raw) if len(raw) <= 20 else LATEST_MS + 1, raw, name)  # no 4300-digit parse
    ago = _AGO.fullmatch(raw)
    if ago:
        return max(now - int(ago.group(1)) * _UNIT_MS[ago.group(2).lower()], 0)
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name} must be a date and time (2026-12-02 14:30, UTC unless an offset is given), a time "
            f"ago (15m, 2h, 3d) or milliseconds since the epoch; got {raw[:60]!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    try:
        ms = int(parsed.timestamp() * 1000)
    except (OverflowError, ValueError):  # 9999-12-31 23:00-01:00: past the range in UTC
        ms = LATEST_MS + 1
    return _in_range(ms, raw, name)


def utc_text(ms: int) -> str:
    """A timestamp as UTC text, "2026-12-02 14:30:05Z" ("-" for 0)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def iso(ms: int) -> str:
    """A timestamp as ISO 8601 UTC ("" for 0): how a time filter is shown back."""
    if not ms:
        return ""
    at = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    millis = f".{ms % 1000:03d}" if ms % 1000 else ""  # kept: a filter shown back filters the same
    return at.strftime("%Y-%m-%dT%H:%M:%S") + millis + "Z"
