"""The committer tasks of a group commit, shared by mutations (group_commit.py) and starts
(start_commit.py).

Callers queue jobs. Up to ``count`` committer tasks, started on demand, each take the first queued
job and then every queued job while the batch weighs less than ``limit``, and hand the batch to
``run``, which commits it and answers each job's future. A batch caught by ``close`` (its
committer cancelled) and every job still queued then fail with Unavailable.
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
    ) -> None:
        self.count = count
        self.limit = limit
        self.weight = weight
        self.run = run
        self._jobs: asyncio.Queue[J] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, job: J) -> None:
        """Queue ``job``, starting a committer if fewer than ``count`` run."""
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
        closing = Unavailable("the store is closing")
        while not self._jobs.empty():
            fail([self._jobs.get_nowait()], closing)

    async def _committer(self) -> None:
        jobs = self._jobs
        while True:
            first = await jobs.get()
            batch = [first]
            weight = self.weight(first)
            while weight < self.limit and not jobs.empty():
                job = jobs.get_nowait()
                batch.append(job)
                weight += self.weight(job)
            try:
                await self.run(batch)
            except asyncio.CancelledError:
                fail(batch, Unavailable("the store is closing"))
                raise
