"""What /metrics reads from the store, sampled in the background (a scrape never waits on it).

Prometheus collects synchronously; figures that need a store query are read here instead, every
``interval`` seconds, while someone scrapes (no scrape for ``IDLE_SECONDS``: no queries, and the
next scrape shows the last sample, the one after it a fresh one): the instances by workflow and status (``Store.count_by_status``)
and the queues the registered definitions name, so a queue with nothing in it still has its
gauges at 0 (docs/metrics.md). Every node of a cluster samples for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from .._model import NodeKind
from .._storage.base import Store

__all__ = ["MetricsSampler", "IDLE_SECONDS"]

log = logging.getLogger("wiggle.server")

IDLE_SECONDS = 300.0  # no scrape for this long: stop querying until the next one
_QUEUED_KINDS = frozenset({NodeKind.TASK, NodeKind.PREDICATE})


class MetricsSampler:
    """The store's share of /metrics, refreshed by ``run``."""

    def __init__(self, store: Store, interval_seconds: float) -> None:
        self.store = store
        self.interval_seconds = max(interval_seconds, 0.05)
        self.by_status: dict[str, dict[str, int]] = {}  # workflow -> status -> instances
        # workflow -> instances waiting for a concurrency slot (docs/flow-control.md#workflow-concurrency)
        self.waiting: dict[str, int] = {}
        self.known_queues: set[str] = set()  # every queue a registered definition names
        self.sampled = False
        # monotonic time of the last scrape (``wanted``); a new server samples for IDLE_SECONDS
        # before its first scrape, so the first one finds the figures
        self.scraped_at = time.monotonic()
        self._versions: set[tuple[str, str]] = set()  # definitions whose queues are known

    def wanted(self) -> None:
        """A scrape read the sample (keeps the sampling going)."""
        self.scraped_at = time.monotonic()

    @property
    def running(self) -> dict[str, int]:
        """Instances RUNNING per workflow, as last sampled (0 for a workflow with none)."""
        return {workflow: counts.get("RUNNING", 0) for workflow, counts in self.by_status.items()}

    @property
    def concurrency_waiting(self) -> dict[str, int]:
        """Instances waiting for a concurrency slot per workflow, as last sampled (0 for a
        workflow with none)."""
        return {workflow: self.waiting.get(workflow, 0) for workflow in self.by_status}

    async def sample(self) -> None:
        """Read the instance counts and the definitions' queues now."""
        self.by_status = await self.store.count_by_status()
        self.waiting = await self.store.concurrency_waiting()
        for record in await self.store.list_workflows():
            loaded = record.loaded
            key = (loaded.definition.name, loaded.version)
            if key in self._versions:
                continue
            for node in loaded.definition.nodes:
                if node.kind in _QUEUED_KINDS or node.queue:
                    self.known_queues.add(loaded.queue_of(node))
            self._versions.add(key)
        self.sampled = True

    async def run(self, stopping: asyncio.Event) -> None:
        """Sample every ``interval_seconds`` while scraped, until ``stopping``; never dies of a
        store error (the next round tries again)."""
        while not stopping.is_set():
            if not self.sampled or time.monotonic() - self.scraped_at < IDLE_SECONDS:
                try:
                    await self.sample()
                except Exception as exc:  # the database is away
                    log.debug("metrics sample failed: %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval_seconds)
