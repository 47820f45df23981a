"""The workers polling this server node: who, on which queues, when last seen (the Queues page)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import msgspec

from .._clock import WALL_CLOCK
from .._limits import MAX_POLL_QUEUES

__all__ = ["Poller", "Pollers", "FORGET_AFTER_MILLIS"]

FORGET_AFTER_MILLIS = 10 * 60 * 1000  # a worker not seen for this long is dropped from the list


class Poller(msgspec.Struct, kw_only=True):
    """One worker as this node saw it poll."""

    worker_id: str
    queues: list[str]
    first_seen: int
    last_seen: int
    polls: int = 0


class Pollers:
    """Updated by PollTasks (one dict write per poll); read by the dashboard."""

    def __init__(self, now: Callable[[], int] = WALL_CLOCK.now) -> None:
        self.now = now  # the server's clock (wiggle/_clock.py): last-seen times compare with its time
        self._by_id: dict[str, Poller] = {}
        self.dispatched: Counter[str] = Counter()  # steps handed out per queue (the dispatch rate)

    def claimed(self, queues: Iterable[str]) -> None:
        """Count the steps a poll handed out, one queue name per step."""
        self.dispatched.update(queues)

    def seen(self, worker_id: str, queues: list[str]) -> None:
        """``worker_id`` polled ``queues`` now."""
        now = self.now()
        known = self._by_id.get(worker_id)
        if known is None:
            if len(self._by_id) > 10_000:  # bounded: forget the long gone first
                self.forget(now)
            known = self._by_id[worker_id] = Poller(
                worker_id=worker_id, queues=sorted(queues), first_seen=now, last_seen=now
            )
        known.last_seen = now
        known.polls += 1
        if any(q not in known.queues for q in queues):  # a new queue (not only a longer list)
            union = set(known.queues) | set(queues)
            # bounded like one poll (MAX_POLL_QUEUES): a worker that keeps polling new queues is
            # shown with the queues of its latest poll, not every queue it ever named
            known.queues = sorted(union if len(union) <= MAX_POLL_QUEUES else set(queues))

    def forget(self, now: int) -> None:
        """Drop workers not seen for FORGET_AFTER_MILLIS."""
        for worker_id, poller in list(self._by_id.items()):
            if now - poller.last_seen > FORGET_AFTER_MILLIS:
                del self._by_id[worker_id]

    def snapshot(self) -> list[Poller]:
        """Every worker seen recently, by id."""
        self.forget(self.now())
        return [self._by_id[k] for k in sorted(self._by_id)]
