"""The workers polling this server node: who, on which queues, when last seen (the Queues page)."""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable

import msgspec

from .._clock import WALL_CLOCK
from .._limits import MAX_POLL_QUEUES

__all__ = ["Poller", "Pollers", "FORGET_AFTER_MILLIS", "MAX_POLLERS"]

FORGET_AFTER_MILLIS = 10 * 60 * 1000  # a worker not seen for this long is dropped from the list
#: The most workers the list holds: past it, a new worker id makes the one seen longest ago go.
MAX_POLLERS = 10_000


class Poller(msgspec.Struct, kw_only=True):
    """One worker as this node saw it poll."""

    worker_id: str
    queues: list[str]
    first_seen: int
    last_seen: int
    polls: int = 0


class Pollers:
    """Updated by PollTasks (a few dict operations per poll); read by the dashboard.

    Kept in the order the workers were last seen (the one seen longest ago first), so dropping
    the long gone, or the oldest when ``MAX_POLLERS`` are known, takes only what it drops. Before,
    a new worker id past 10,000 scanned every entry: a credential polling with a new id each time
    (50,000 polls on one stream) held the server's event loop for two minutes."""

    def __init__(self, now: Callable[[], int] = WALL_CLOCK.now) -> None:
        self.now = now  # the server's clock (wiggle/_clock.py): last-seen times compare with its time
        self._by_id: OrderedDict[str, Poller] = OrderedDict()
        self.dispatched: Counter[str] = Counter()  # steps handed out per queue (the dispatch rate)

    def claimed(self, queues: Iterable[str]) -> None:
        """Count the steps a poll handed out, one queue name per step."""
        self.dispatched.update(queues)

    def seen(self, worker_id: str, queues: list[str]) -> None:
        """``worker_id`` polled ``queues`` now."""
        now = self.now()
        by_id = self._by_id
        known = by_id.get(worker_id)
        if known is None:
            if len(by_id) >= MAX_POLLERS:  # bounded: the long gone go first, else the oldest
                self.forget(now)
                while len(by_id) >= MAX_POLLERS:
                    by_id.popitem(last=False)
            known = by_id[worker_id] = Poller(
                worker_id=worker_id, queues=sorted(queues), first_seen=now, last_seen=now
            )
        else:
            by_id.move_to_end(worker_id)
        known.last_seen = now
        known.polls += 1
        if any(q not in known.queues for q in queues):  # a new queue (not only a longer list)
            union = set(known.queues) | set(queues)
            # bounded like one poll (MAX_POLL_QUEUES): a worker that keeps polling new queues is
            # shown with the queues of its latest poll, not every queue it ever named
            known.queues = sorted(union if len(union) <= MAX_POLL_QUEUES else set(queues))

    def forget(self, now: int) -> None:
        """Drop workers not seen for FORGET_AFTER_MILLIS (the first ones: the list is in the
        order they were last seen)."""
        by_id = self._by_id
        while by_id:
            oldest = next(iter(by_id.values()))
            if now - oldest.last_seen <= FORGET_AFTER_MILLIS:
                break
            by_id.popitem(last=False)

    def snapshot(self) -> list[Poller]:
        """Every worker seen recently, by id."""
        self.forget(self.now())
        return [self._by_id[k] for k in sorted(self._by_id)]
