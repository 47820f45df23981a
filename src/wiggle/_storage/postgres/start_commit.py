"""Starts in the group commit: concurrent starts share one transaction, each answered after it.

``StartInstance`` calls and ``StartInstances`` batches queue up as jobs; a few committer tasks
each take queued jobs, up to ``MAX_ROWS`` instances, into one transaction and commit once, the
way group_commit.py does for mutations. Request ids (docs/semantics.md#idempotent-starts) are
claimed first, in the same transaction, in the ``start_requests`` table (migration 0007): an item
whose request id is taken is not inserted and answers with the instance that holds the id.

A failed group is never half-applied: transient failures retry the whole transaction (db.py); a
group that fails otherwise is retried job by job, so a bad job fails alone and its neighbours
still start. A commit whose acknowledgement was lost is recognised on the retry (its instances
exist) and answered as committed.

A start made from the node's remembered latest version (NewInstance.expect_latest) is confirmed
in the same transaction by ``expect_latest(name, version)`` (migration 0009), queued before the
inserts: when a newer version was registered meanwhile the statement fails, nothing commits,
and the caller gets StaleLatest (retried job by job like any failed group, so only the stale
starts fail) and starts again from a fresh read.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import psycopg

from ...errors import Unavailable
from ..base import NewInstance, StaleLatest
from .committers import Committers, fail
from .db import Conn, Database, transaction
from .statements import StartQueries

__all__ = ["StartCommit"]

# Write new instances (and their NOTIFYs) on a connection inside its transaction.
PersistNew = Callable[[Conn, list[NewInstance]], Awaitable[None]]

#: The SQLSTATE expect_latest raises (sql/0009_expect_latest.sql).
STALE_LATEST = "WG001"


def _expected(items: list[NewInstance], done: set[str] | frozenset[str]) -> list[tuple[str, str]]:
    """The (workflow, version) pairs to confirm as latest: those of the items started from the
    remembered latest version and not already stored (``done``), in one order for every group."""
    return sorted(
        {
            (i.state.instance.workflow, i.state.instance.version)
            for i in items
            if i.expect_latest and i.state.instance.id not in done
        }
    )


class _Job:
    """Queued starts: the items, and whom to answer after the commit."""

    __slots__ = ("items", "future")

    def __init__(self, items: list[NewInstance], future: asyncio.Future[list[str]]) -> None:
        self.items = items
        self.future = future


def _rows(job: _Job) -> int:
    return len(job.items)  # a group is counted in instances


class StartCommit:
    """The start committers and their queue (committers.py), over ``db``.

    ``persist`` writes new instances inside the transaction; ``committed(created)`` runs after each
    commit with the instances it created, before the callers are answered.
    """

    MAX_ROWS = 1000  # instances committed together at most (a bigger job is committed alone)

    def __init__(
        self,
        db: Database,
        queries: StartQueries,
        persist: PersistNew,
        committed: Callable[[list[NewInstance]], None],
        stale: Callable[[str, str], None] = lambda name, version: None,
        linger: float = 0.0,
    ) -> None:
        self.db = db
        self.queries = queries
        self.persist = persist
        self.committed = committed
        self.stale = stale  # called with (name, version) when expect_latest found a newer version
        # Two committers overlap one group's commit with the next one's work; more would only
        # take connections the mutations' committers and the claims need.
        self.committers = max(1, min(2, db.pool_size - 2))
        self._committers = Committers[_Job](self.committers, self.MAX_ROWS, _rows, self._run, linger)
        self.groups = 0  # transactions committed (for tests and the benchmark)

    async def submit(self, items: list[NewInstance]) -> list[str]:
        """Queue ``items``; once committed, the instance id each one names, in order."""
        if not items:
            return []
        job = _Job(items, asyncio.get_running_loop().create_future())
        self._committers.submit(job)
        return await job.future

    async def close(self) -> None:
        """Stop the committers; queued starts fail with Unavailable."""
        await self._committers.close()

    async def _run(self, batch: list[_Job]) -> None:
        """Commit one group and answer its jobs (committers.py calls this)."""
        try:
            answers = await self._commit(batch)
        except asyncio.CancelledError:
            raise
        except Unavailable as exc:  # transient failures were retried already: every caller learns it
            fail(batch, exc)
            return
        except BaseException as exc:
            if len(batch) > 1:
                # One job's rows broke the shared transaction (nothing of it was committed): retry
                # job by job, so the error reaches only the caller whose rows cause it.
                for job in batch:
                    await self._run([job])
            else:
                fail(batch, exc)
            return
        for job, ids in zip(batch, answers, strict=True):
            if not job.future.done():
                job.future.set_result(ids)

    async def _commit(self, batch: list[_Job]) -> list[list[str]]:
        items = [item for job in batch for item in job.items]
        attempts = [0]
        created, answers = await self.db.run(
            "start", functools.partial(self._transaction, items=items, attempts=attempts)
        )
        self.groups += 1
        self.committed(created)
        out: list[list[str]] = []
        at = 0
        for job in batch:
            out.append(answers[at : at + len(job.items)])
            at += len(job.items)
        return out

    async def _transaction(
        self, conn: Conn, items: list[NewInstance], attempts: list[int]
    ) -> tuple[list[NewInstance], list[str]]:
        expected = _expected(items, frozenset())
        try:
            return await self._write(conn, items, attempts, expected)
        except psycopg.Error as exc:
            if exc.sqlstate != STALE_LATEST:
                raise
            for name, version in expected:  # which one is stale the error does not say: recheck all
                self.stale(name, version)
            raise StaleLatest(
                f"a newer version of {', '.join(n for n, _ in expected)} was registered"
            ) from None

    async def _write(
        self, conn: Conn, items: list[NewInstance], attempts: list[int], expected: list[tuple[str, str]]
    ) -> tuple[list[NewInstance], list[str]]:
        q = self.queries
        attempts[0] += 1
        async with transaction(conn) as pipeline:
            if attempts[0] == 1:
                for name, version in expected:  # fails the transaction if a newer version exists
                    await conn.execute(q.expect_latest, (name, version))
            cur = None
            done: set[str] = set()
            owners: dict[str, str] = {}
            if attempts[0] > 1:
                # A retry, perhaps after a lost acknowledgement: the earlier attempt's
                # instances exist if it committed (all of them: one transaction).
                ids = [item.state.instance.id for item in items]
                cur = await conn.execute(q.existing_instances, (ids,))
            keyed = sorted({item.request_id for item in items if item.request_id})
            claimed: dict[str, str] = {}
            if keyed:
                # First item of each request id claims it (sorted: two groups lock in one order).
                first: dict[str, str] = {}
                for item in items:
                    if item.request_id and item.request_id not in first:
                        first[item.request_id] = item.state.instance.id
                cur_claim = await conn.execute(q.claim_requests, (keyed, [first[r] for r in keyed]))
                await pipeline.sync()
                if cur is not None:
                    done = {row[0] for row in await cur.fetchall()}
                claimed = {r: i for r, i in await cur_claim.fetchall()}
                taken = [r for r in keyed if r not in claimed]
                if taken:
                    cur_owner = await conn.execute(q.request_owners, (taken,))
                    await pipeline.sync()
                    owners = {r: i for r, i in await cur_owner.fetchall()}
            elif cur is not None:
                await pipeline.sync()
                done = {row[0] for row in await cur.fetchall()}
            if attempts[0] > 1 and expected:
                # A retry: check only what is still to insert (a lost acknowledgement's
                # instances exist and are answered as committed, whatever was registered since).
                for name, version in _expected(items, done):
                    await conn.execute(q.expect_latest, (name, version))
            fresh: list[NewInstance] = []  # to insert now
            created: list[NewInstance] = []  # inserted by this group (now or by a lost attempt)
            answers: list[str] = []
            for item in items:
                instance_id = item.state.instance.id
                rid = item.request_id
                if rid:
                    owner = claimed.get(rid) or owners.get(rid, "")
                    if not owner:  # never expected: the row exists or this group claimed it
                        raise Unavailable(f"start request {rid!r} was claimed and released; retry")
                    answers.append(owner)
                    if owner != instance_id:
                        continue
                else:
                    answers.append(instance_id)
                created.append(item)
                if instance_id not in done:
                    fresh.append(item)
            if fresh:
                await self.persist(conn, fresh)
        return created, answers
