"""The committer tasks of a group commit, shared by mutations (group_commit.py) and starts
(start_commit.py).

Callers queue jobs. Up to ``count`` committer tasks, started on demand, each take the first queued
job and then every queued job while the batch weighs less than ``limit``, and hand the batch to
``run``, which commits it and answers each job's future. A batch caught by ``close`` (its
committer cancelled) and every job still queued then fail with Unavailable.

**Linger under contention.** A committer that finds the queue non-empty commits at once, so under
a steady stream of callers it commits almost one job per transaction: the server's event loop
hands it each request as soon as it has read it, faster than the next one arrives. Each
transaction costs the server far more than each job in it (bench/README.md, "Round four"), so
when a job was queued while another batch was being committed (callers overlap: more are on
their way), the committer waits ``linger`` seconds before taking its batch. A lone caller (each
job submitted after the previous one was answered) never overlaps and never waits.

Only the starts' committers linger (start_commit.py). Mutations do not: a report waits for its
commit before its worker polls again, so holding reports back holds the next claims back too, and
their groups already fill up from the many reports in flight (measured in bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ...errors import Unavailable

__all__ = ["Committers", "fail"]


class _Job(Protocol):
    future: asyncio.Future[Any]


J = TypeVar("J", bound=_Job)


def fail(jobs: Sequence[_Job], exc: BaseException) -> None:
    """Answer every job of ``jobs`` not answered yet with ``exc``."""
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(exc)


class Committers(Generic[J]):
    """A queue of jobs and the committer tasks that drain it in batches."""

    def __init__(
        self,
        count: int,
        limit: int,
        weight: Callable[[J], int],
        run: Callable[[list[J]], Awaitable[None]],
        linger: float = 0.0,
    ) -> None:
        self.count = count
        self.limit = limit
        self.weight = weight
        self.run = run
        self.linger = linger  # seconds a committer waits for more jobs when callers overlap
        self._jobs: asyncio.Queue[J] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = 0  # batches being committed now
        self._overlapped = False  # a job was queued while a batch was being committed
        self.lingered = 0  # batches that waited (tests, the benchmark)

    def submit(self, job: J) -> None:
        """Queue ``job``, starting a committer if fewer than ``count`` run."""
        if self._running:
            self._overlapped = True
        self._jobs.put_nowait(job)
        if len(self._tasks) < self.count:
            self._tasks.add(asyncio.ensure_future(self._committer()))

    async def close(self) -> None:
        """Stop the committers; queued jobs fail with Unavailable."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        closing = Unavailable("the store is closing", not_applied=True)  # these never ran
        while not self._jobs.empty():
            fail([self._jobs.get_nowait()], closing)

    async def _committer(self) -> None:
        jobs = self._jobs
        while True:
            first = await jobs.get()
            if self._overlapped and self.linger > 0:
                self._overlapped = False
                self.lingered += 1
                try:
                    await asyncio.sleep(self.linger)
                except asyncio.CancelledError:
                    fail([first], Unavailable("the store is closing", not_applied=True))
                    raise
            batch = [first]
            weight = self.weight(first)
            while weight < self.limit and not jobs.empty():
                job = jobs.get_nowait()
                batch.append(job)
                weight += self.weight(job)
            self._running += 1
            try:
                await self.run(batch)
            except asyncio.CancelledError:
                fail(batch, Unavailable("the store is closing"))
                raise
            finally:
                self._running -= 1
