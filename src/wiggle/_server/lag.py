"""The queue-lag monitor: per queue the ready depth, the oldest ready step's age and the dispatch
rate, a warning when a queue falls behind, with hysteresis so it does not flap.

Every ``interval`` the monitor reads ``Store.queue_stats`` (READY tokens that are due; a delayed
retry is not lag, and a token in a LOCAL_SYNC / LOCAL_ASYNC local run is RUNNING, so an instance
a worker drives locally never looks like lag). A queue starts *lagging* when its oldest due step
has waited ``warn_millis`` or more, and stops only once that age is below ``clear_millis`` (lower):
one warning when it starts, one info line when it recovers (docs/semantics.md#queue-lag). Only the
clock leader logs (every node of a cluster reads the same queues); every node exports the gauges.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec

from .._storage.base import SchemaMissing, Store
from .._storage.ops import QueueStat

__all__ = ["QueueLagMonitor", "QueueLag"]

log = logging.getLogger("wiggle.lag")


class QueueLag(msgspec.Struct, kw_only=True):
    """One queue as the monitor last saw it."""

    queue: str
    ready: int
    delayed: int
    running: int
    in_local_run: int
    oldest_ready_age_ms: int
    rate_per_second: float | None  # steps dispatched per second since the previous look
    lagging: bool
    lagging_since: int = 0  # ms, while lagging
    # limits (docs/flow-control.md): steps waiting for a slot of their key, steps running under a
    # key's limit, and how long (ms) the queue's rate holds its due steps back (0: it does not)
    limit_waiting: int = 0
    limit_held: int = 0
    rate_limited_ms: int = 0
    rate_waiting: int = 0  # due steps waiting for their key's rate (docs/flow-control.md#per-key-rate-limits)


class QueueLagMonitor:
    """Watches every queue of ``store``; ``dispatched`` counts steps handed to workers per queue."""

    def __init__(
        self,
        store: Store,
        warn_millis: int,
        clear_millis: int,
        interval_seconds: float,
        dispatched: Counter[str] | None = None,
    ) -> None:
        if not 0 <= clear_millis < warn_millis:
            raise ValueError(f"clear_millis ({clear_millis}) must be below warn_millis ({warn_millis})")
        self.store = store
        self.warn_millis = warn_millis
        self.clear_millis = clear_millis
        self.interval_seconds = interval_seconds
        self.dispatched: Counter[str] = dispatched if dispatched is not None else Counter()
        self.queues: dict[str, QueueLag] = {}
        self.warnings = 0  # lag warnings logged so far (tests, diagnostics)
        self._last_counts: dict[str, int] = {}
        self._last_at = 0

    def observe(self, stats: Sequence[QueueStat], now: int, speak: bool = True) -> list[QueueLag]:
        """Update every queue from ``stats`` taken at ``now``; log lag transitions if ``speak``."""
        elapsed = (now - self._last_at) / 1000 if self._last_at else 0.0
        seen: dict[str, QueueLag] = {}
        counts = dict(self.dispatched)
        for s in stats:
            age = now - s.oldest_ready_at if s.ready and s.oldest_ready_at else 0
            before = self.queues.get(s.queue)
            was = before.lagging if before is not None else False
            lagging = age >= self.warn_millis if not was else age >= self.clear_millis
            rate = None
            if elapsed > 0:
                rate = (counts.get(s.queue, 0) - self._last_counts.get(s.queue, 0)) / elapsed
            lag = QueueLag(
                queue=s.queue,
                ready=s.ready,
                delayed=s.delayed,
                running=s.running,
                in_local_run=s.in_local_run,
                oldest_ready_age_ms=age,
                rate_per_second=rate,
                lagging=lagging,
                lagging_since=(before.lagging_since if was and before else now) if lagging else 0,
                limit_waiting=s.limit_waiting,
                limit_held=s.limit_held,
                rate_limited_ms=max(s.rate_limited_until - now, 0) if s.rate_limited_until else 0,
                rate_waiting=s.rate_waiting,
            )
            seen[s.queue] = lag
            if speak and lagging and not was:
                self.warnings += 1
                rate_text = (
                    f"{rate:.1f} steps/s dispatched" if rate is not None else "dispatch rate not known yet"
                )
                log.warning(
                    "queue %s is falling behind: %d steps ready, the oldest waiting %.1f s (threshold %.1f s); %s",
                    s.queue,
                    s.ready,
                    age / 1000,
                    self.warn_millis / 1000,
                    rate_text,
                    extra={"queue": s.queue},
                )
            elif speak and was and not lagging:
                log.info(
                    "queue %s caught up: oldest ready step waits %.1f s",
                    s.queue,
                    age / 1000,
                    extra={"queue": s.queue},
                )
        for name, before in self.queues.items():
            if name not in seen and before.lagging and speak:
                log.info("queue %s caught up: nothing ready", name, extra={"queue": name})
        self.queues = seen
        self._last_counts = counts
        self._last_at = now
        return list(seen.values())

    async def tick(self) -> None:
        """One look at the store."""
        now = self.store.clock.now()
        stats = await self.store.queue_stats(now)
        self.observe(stats, now, speak=await self.store.clock_leader())

    async def run(self, stopping: asyncio.Event) -> None:
        """Look every ``interval_seconds`` until ``stopping`` is set; never dies of a store error."""
        while not stopping.is_set():
            try:
                await self.tick()
            except Exception as exc:  # the database is away: the next tick tries again
                if not isinstance(exc, SchemaMissing):  # the store says that once a minute
                    log.warning("queue-lag check failed: %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval_seconds)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """queue -> its QueueLag as JSON-able data (the dashboard's Queues page)."""
        return {name: msgspec.to_builtins(lag) for name, lag in self.queues.items()}
