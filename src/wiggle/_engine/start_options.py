"""A start's flow-control options: priority, delayed start, deduplication (docs/flow-control.md).

Checked once here, for every way in (the wire's StartInstance / StartInstances, the instance
layer, the test kit), so each refusal names its field and changes nothing. Pure: no I/O, no wire.

**Priority and its aging.** A READY step is claimed in the order of its *claim rank*,
``available_at - priority * PRIORITY_AGING_MILLIS``, oldest rank first: a step of priority ``p``
goes as if it had become ready ``p`` minutes earlier. So within one priority the order is FIFO,
a higher priority goes first, and no step waits for ever: a step ready at ``t`` is claimed before
every step that becomes ready after ``t + (PRIORITY_MAX - p) minutes`` (its effective priority
grows by one level per minute it waits). The PostgreSQL claim orders by the same expression
through an index on it (sql/0012_start_options.sql); the memory store computes it in Python.
"""

from __future__ import annotations

import msgspec

from .._limits import MAX_DURATION_MILLIS
from ..errors import InvalidArgument

__all__ = [
    "PRIORITY_MIN",
    "PRIORITY_MAX",
    "PRIORITY_AGING_MILLIS",
    "MAX_DEDUP_KEY_CHARS",
    "StartOptions",
    "NO_OPTIONS",
    "check_start_options",
    "claim_rank",
]

#: The priorities a start may ask for; 0 is the default.
PRIORITY_MIN, PRIORITY_MAX = -100, 100
#: What one priority level is worth in waiting time (the aging rule above). Baked into the
#: PostgreSQL claim index (sql/0012_start_options.sql): change both together.
PRIORITY_AGING_MILLIS = 60_000
#: The longest deduplication key (characters).
MAX_DEDUP_KEY_CHARS = 256


class StartOptions(msgspec.Struct, frozen=True):
    """What a start asked for beyond its context (checked: ``check_start_options``)."""

    priority: int = 0
    start_at: int = 0  # ms since the epoch; 0 (or a moment already past): start at once
    dedup_key: str = ""
    dedup_window: int = 0  # ms the key stays held after the instance finishes
    # this start's workflow time limit (ms; docs/semantics.md#workflow-time-limits): None, the
    # definition's; 0, none
    timeout_millis: int | None = None

    def delayed(self, now: int) -> bool:
        """True when the first step must wait for ``start_at``."""
        return self.start_at > now


NO_OPTIONS = StartOptions()


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, got {type(value).__name__}")
    return value


def check_start_options(
    now: int,
    *,
    priority: object = 0,
    start_at: object = 0,
    start_delay: object = 0,
    dedup_key: object = "",
    dedup_window: object = 0,
    timeout: object = None,
) -> StartOptions:
    """The checked options; InvalidArgument naming the field otherwise.

    ``start_at`` is ms since the epoch (0: none), ``start_delay`` and ``dedup_window`` ms (0:
    none); at most one of ``start_at`` and ``start_delay``. ``timeout`` is the start's own
    workflow time limit in ms (None: the definition's; 0: none).
    """
    priority = _int(priority, "priority")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidArgument(
            f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX} (higher is claimed first), "
            f"got {priority}"
        )
    start_at = _int(start_at, "start_at")
    start_delay = _int(start_delay, "start_delay")
    if start_at and start_delay:
        raise InvalidArgument("give start_at or start_delay, not both")
    if start_delay < 0:
        raise InvalidArgument(f"start_delay must be 0 or more milliseconds, got {start_delay}")
    if start_delay > MAX_DURATION_MILLIS:
        raise InvalidArgument(
            f"start_delay must be at most {MAX_DURATION_MILLIS} ms (ten years), got {start_delay}"
        )
    if start_at < 0:
        raise InvalidArgument(f"start_at must be a time after the epoch, got {start_at} ms")
    if start_at > now + MAX_DURATION_MILLIS:
        raise InvalidArgument(f"start_at is more than ten years ahead ({start_at} ms since the epoch)")
    if start_delay:
        start_at = now + start_delay
    if not isinstance(dedup_key, str):
        raise InvalidArgument(f"dedup_key must be a string, got {type(dedup_key).__name__}")
    if len(dedup_key) > MAX_DEDUP_KEY_CHARS:
        raise InvalidArgument(f"dedup_key is {len(dedup_key)} characters; the limit is {MAX_DEDUP_KEY_CHARS}")
    if "\x00" in dedup_key:
        raise InvalidArgument("dedup_key must not contain NUL characters")
    dedup_window = _int(dedup_window, "dedup_window")
    if dedup_window < 0 or dedup_window > MAX_DURATION_MILLIS:
        raise InvalidArgument(
            f"dedup_window must be between 0 and {MAX_DURATION_MILLIS} ms (ten years), got {dedup_window}"
        )
    if dedup_window and not dedup_key:
        raise InvalidArgument("dedup_window needs a dedup_key")
    if timeout is not None:
        timeout = _int(timeout, "timeout")
        if not 0 <= timeout <= MAX_DURATION_MILLIS:
            raise InvalidArgument(
                f"timeout must be between 0 (no time limit) and {MAX_DURATION_MILLIS} ms (ten years), got {timeout}"
            )
    return StartOptions(priority, start_at if start_at > now else 0, dedup_key, dedup_window, timeout)


def claim_rank(available_at: int, priority: int) -> int:
    """The order READY steps of a queue are claimed in, smallest first (the module's aging rule)."""
    return available_at - priority * PRIORITY_AGING_MILLIS
