"""The clock: where workflow time comes from (sleeps, retry backoff, leases, deadlines, timestamps).

The engine is pure and takes ``now`` as a parameter (wiggle/_engine/engine.py); whoever calls it
reads the time from one ``Clock``: the instance layer (``Instances.clock``,
wiggle/_server/instances.py) and the stores (``Store.clock``, wiggle/_storage/base.py), which
share the same object. In production that object is ``WALL_CLOCK``, which nothing can move. A test
kit (wiggle/testing.py) injects a ``VirtualClock`` instead and moves it by hand or whenever every
live instance waits on time. Real durations (how long a poll or a wait may block, heartbeat
intervals) are not workflow time and keep using ``time.monotonic``.
"""

from __future__ import annotations

import abc
import time

__all__ = ["Clock", "WallClock", "WALL_CLOCK", "VirtualClock"]


class Clock(abc.ABC):
    """A source of workflow time: epoch milliseconds, the unit of every stored timestamp."""

    __slots__ = ()

    @abc.abstractmethod
    def now(self) -> int:
        """The current time in milliseconds since the epoch."""


class WallClock(Clock):
    """The production clock: the system's wall clock. It offers no way to be moved."""

    __slots__ = ()

    def now(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "<WallClock>"


#: The one wall clock every server, store and instance layer uses unless a test injects another.
WALL_CLOCK = WallClock()


class VirtualClock(Clock):
    """A clock that stands still until moved: ``advance(millis)`` or ``advance_to(at)``.

    It never goes backwards (a timestamp already written must stay in the past). Starts at
    ``start`` (epoch ms), by default the wall clock's time when created.
    """

    __slots__ = ("_now",)

    def __init__(self, start: int | None = None) -> None:
        if start is not None and start < 0:
            raise ValueError(f"a virtual clock starts at epoch milliseconds >= 0, not {start}")
        self._now = WALL_CLOCK.now() if start is None else int(start)

    def now(self) -> int:
        """The virtual time in epoch milliseconds: where it was last moved to (it never moves by
        itself)."""
        return self._now

    def advance(self, millis: int) -> int:
        """Move forward by ``millis`` (>= 0); the new time."""
        if millis < 0:
            raise ValueError(f"a virtual clock only moves forward: cannot advance by {millis} ms")
        self._now += int(millis)
        return self._now

    def advance_to(self, at: int) -> int:
        """Move forward to ``at`` (epoch ms) if it is later; the new time."""
        if at > self._now:
            self._now = int(at)
        return self._now

    def __repr__(self) -> str:
        return f"<VirtualClock at {self._now}>"
