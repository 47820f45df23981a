"""Queue limits (docs/flow-control.md#queue-limits): at most ``max_running`` steps of a queue
running at once, and at most ``rate_max`` claims per ``rate_period_millis``, cluster-wide.

Set through the SetQueueLimit RPC (``wiggle queues set-limit``) and kept by the store (the memory
store in a dict; PostgreSQL in the ``queue_limits`` table of migration 0014, read by every server,
so they hold across server processes and restarts). The stores apply them in their claims, with
what is here: the checks of a limit, and the rate's arithmetic.

The rate is a GCRA (generic cell rate algorithm) without bursts: a queue's claims are spaced at
least ``rate_period_millis / rate_max`` apart, so that any window of ``rate_period_millis`` holds
at most ``rate_max`` of them (a sliding window, smoothed; a rate of more than one claim per
millisecond admits them within each millisecond, the clock's resolution). Its whole state is one number per
queue, the "theoretical arrival time" ``tat`` (ms): the first moment the next claim may happen.
Times are the claims' clock (the server's, or the test kit's virtual one: time skipping moves
every rate window).
"""

from __future__ import annotations

import math

import msgspec

from .._limits import MAX_COUNT, MAX_DURATION_MILLIS, MAX_RATE_PERIOD_MILLIS
from .._model import validate_name
from ..errors import InvalidArgument
from .ops import QueueStat

__all__ = [
    "QueueLimit",
    "check_queue_limit",
    "admit",
    "next_admit_at",
    "rate_admit",
    "rate_next_at",
    "describe",
    "MAX_RATE_PERIOD_MILLIS",
]

assert MAX_RATE_PERIOD_MILLIS <= MAX_DURATION_MILLIS


class QueueLimit(msgspec.Struct, kw_only=True):
    """The limits of one queue (0: none)."""

    queue: str
    max_running: int = 0  # steps of the queue running at once, cluster-wide
    rate_max: int = 0  # claims per rate period
    rate_period_millis: int = 0

    @property
    def limited(self) -> bool:
        """True if the queue has any limit."""
        return self.max_running > 0 or self.rate_max > 0


def check_queue_limit(limit: QueueLimit) -> QueueLimit:
    """InvalidArgument naming the field unless ``limit`` is one the stores can apply."""
    validate_name(limit.queue, "queue")
    for field, value in (("max_running", limit.max_running), ("rate_max", limit.rate_max)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise InvalidArgument(
                f"{field} must be an integer from 0 (no limit) to {MAX_COUNT}, got {value!r}"
            )
    period = limit.rate_period_millis
    if isinstance(period, bool) or not isinstance(period, int):
        raise InvalidArgument(f"rate_period_millis must be an integer, got {period!r}")
    if limit.rate_max and not 1 <= period <= MAX_RATE_PERIOD_MILLIS:
        raise InvalidArgument(
            f"a rate limit needs a period from 1 ms to {MAX_RATE_PERIOD_MILLIS} ms (a day), got {period} ms"
        )
    if not limit.rate_max and period:
        raise InvalidArgument("rate_period_millis without rate_max: give both, or neither")
    return limit


def _interval(limit: QueueLimit) -> float:
    return limit.rate_period_millis / limit.rate_max


def _tolerance(interval: float) -> float:
    """How far ahead of ``now`` the next claim's moment may be and still be admitted: none when
    the interval is a millisecond or more; below that, the rest of the millisecond, so a rate
    finer than the clock's millisecond still admits its claims (at most one millisecond's worth
    early)."""
    return max(0.0, 1.0 - interval)


def admit(limit: QueueLimit, tat: float, now: int) -> float | None:
    """The queue's next ``tat`` if its rate admits a claim at ``now``; None if it does not."""
    return rate_admit(limit.rate_max, limit.rate_period_millis, tat, now)


def next_admit_at(limit: QueueLimit, tat: float, now: int) -> int:
    """The first moment (ms, at least ``now``) the queue's rate admits a claim."""
    return rate_next_at(limit.rate_max, limit.rate_period_millis, tat, now)


def rate_admit(rate_max: int, period_millis: int, tat: float, now: int) -> float | None:
    """The next ``tat`` of a rate of ``rate_max`` per ``period_millis`` (0: none) if it admits a
    claim at ``now``; None if it does not. A queue's rate and a step's per-key rate
    (docs/flow-control.md#per-key-rate-limits) are both this arithmetic."""
    if not rate_max:
        return tat
    interval = period_millis / rate_max
    if tat > now + _tolerance(interval) + 1e-6:  # the previous claim was less than an interval ago
        return None
    return max(tat, float(now)) + interval


def rate_next_at(rate_max: int, period_millis: int, tat: float, now: int) -> int:
    """The first moment (ms, at least ``now``) a rate (as ``rate_admit``) admits a claim."""
    if not rate_max:
        return now
    interval = period_millis / rate_max
    return max(now, math.ceil(tat - _tolerance(interval) - 1e-6))


def describe(
    stats: dict[str, QueueStat], limits: list[tuple[QueueLimit, float]], now: int
) -> list[QueueStat]:
    """``stats`` (by queue) with each limited queue's limits and rate wait, every limited queue
    listed (an idle one too), by queue name. ``limits``: (limit, its rate's tat)."""
    for limit, tat in limits:
        stat = stats.setdefault(limit.queue, QueueStat(queue=limit.queue))
        stat.max_running = limit.max_running
        stat.rate_max = limit.rate_max
        stat.rate_period_millis = limit.rate_period_millis
        if limit.rate_max and admit(limit, tat, now) is None:
            stat.rate_limited_until = next_admit_at(limit, tat, now)
    return [stats[q] for q in sorted(stats)]
