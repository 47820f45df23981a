"""Starts in the group commit: concurrent starts share one transaction, each answered after it.

``StartInstance`` calls and ``StartInstances`` batches queue up as jobs; a few committer tasks
each take queued jobs, up to ``MAX_ROWS`` instances, into one transaction and commit once, the
way group_commit.py does for mutations. Request ids (docs/semantics.md#idempotent-starts) are
claimed first, in the same transaction, in the ``start_requests`` table (migration 0007): an item
whose request id is taken is not inserted and answers with the instance that holds the id.
Deduplication keys (docs/flow-control.md#deduplication) are claimed next, in ``start_dedup``
(migration 0012): an item whose key another instance of its workflow holds (live, or finished
less than that instance's window ago) is not inserted and answers with the holder, marked
``deduplicated``; its request id, if any, is pointed at the holder too. Both claims are
``INSERT ... ON CONFLICT`` on a unique index, so concurrent starts on any number of servers
agree on one instance per request id and per key.

A failed group is never half-applied: transient failures retry the whole transaction (db.py); a
group that fails otherwise is retried job by job, so a bad job fails alone and its neighbours
still start. A commit whose acknowledgement was lost is recognised on the retry (its instances
exist) and answered as committed.

A start made from the node's remembered latest version (NewInstance.expect_latest) is confirmed
in the same transaction by ``expect_latest(name, version)`` (migration 0009), queued before the
inserts: when a newer version was registered meanwhile the statement fails, nothing commits,
and the caller gets StaleLatest (retried job by job like any failed group, so only the stale
starts fail) and starts again from a fresh read.

A group has nothing to read before it writes unless one of its request ids is taken or one of its
deduplication keys held: its first attempt is one statement on the autocommit connection, its own
transaction, the ``expect_latest`` checks, the request ids' claim (``claim_requests``, migration
0026), the keys' claim (``claim_keys``, migration 0027) and the transaction's id as its query and
the rows as its data-modifying CTEs (writes.py ``write_one``), instead of BEGIN, the checks, the
claims' reads, the writes, the id and COMMIT pipelined in two or three round trips. A request id
found taken raises in its claim (SQLSTATE WG004), a key found held in its (WG005); nothing of the
statement is written, and the group goes the long way (the claims' reads, then the rows) in the
same attempt: a repeated request id or a deduplicated start costs one statement more than
before, a new one a round trip or two less.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncPipeline as Pipeline
from psycopg import sql

from ...errors import Unavailable
from ..base import NewInstance, StaleLatest
from .codecs import text_array
from .committers import Committers, fail
from .db import Conn, Database, transaction

__all__ = ["StartCommit", "StartQueries"]

# Write new instances (and their NOTIFYs) on a connection inside its transaction.
PersistNew = Callable[[Conn, list[NewInstance]], Awaitable[None]]
# Write new instances after a check (a SELECT of one row, its parameters) in one statement, its
# own transaction, on an autocommit connection: the check's row (writes.py ``write_one``).
PersistChecked = Callable[[Conn, list[NewInstance], tuple[str, list[Any]]], Awaitable[Any]]


class StartQueries:
    """The statements of the start transaction (``StartCommit``), rendered once with the schema quoted."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema).as_string()
        self.expect_latest = f"SELECT {s}.expect_latest(%s, %s)"  # migration 0009
        self._expect_latest_call = f"{s}.expect_latest(%s, %s)"
        self._claim_requests_call = f"{s}.claim_requests(%s::text[], %s::text[])"  # migration 0026
        self._claim_keys_call = f"{s}.claim_keys(%s::text[], %s::text[], %s::text[], %s::bigint)"  # 0027
        self.existing_instances = f"SELECT id FROM {s}.instances WHERE id = ANY(%s)"
        # the transaction's id: the xmin of every row it wrote (state_cache.py keeps new instances)
        self.xid = "SELECT pg_current_xact_id()::xid::text"
        # A taken request id is skipped (DO NOTHING waits for a concurrent holder's commit first).
        self.claim_requests = (
            f"INSERT INTO {s}.start_requests (request_id, instance_id) "
            "SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT (request_id) DO NOTHING "
            "RETURNING request_id, instance_id"
        )
        self.request_owners = (
            f"SELECT request_id, instance_id, deduplicated FROM {s}.start_requests WHERE request_id = ANY(%s)"
        )
        # A deduplicated start's request id names the key's holder (migration 0012).
        self.redirect_requests = (
            f"UPDATE {s}.start_requests r SET instance_id = v.instance_id, deduplicated = true "
            "FROM unnest(%s::text[], %s::text[]) AS v(request_id, instance_id) WHERE r.request_id = v.request_id"
        )
        # Deduplication keys (migration 0012): a new key is inserted; a held one is taken over only
        # when its holder is finished and past its window (the last parameter is now, in ms); a
        # holder this statement cannot see yet (committed meanwhile) counts as holding it. Rows
        # in key order: two groups lock in one order.
        self.claim_keys = (
            f"INSERT INTO {s}.start_dedup AS d (workflow, dedup_key, instance_id) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) AS v(w, k, i) ORDER BY w, k "
            "ON CONFLICT (workflow, dedup_key) DO UPDATE SET instance_id = EXCLUDED.instance_id "
            f"WHERE EXISTS (SELECT 1 FROM {s}.instances h WHERE h.id = d.instance_id "
            "AND h.status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND h.finished_at + h.dedup_window <= %s) "
            "RETURNING workflow, dedup_key, instance_id"
        )
        # (the one-statement start: see ``one_statement_check``)
        self.key_holders = (
            f"SELECT d.workflow, d.dedup_key, d.instance_id FROM {s}.start_dedup d "
            "JOIN unnest(%s::text[], %s::text[]) AS v(w, k) ON d.workflow = v.w AND d.dedup_key = v.k"
        )

    def one_statement_check(
        self,
        pairs: list[tuple[str, str]],
        requests: dict[str, str] | None = None,
        keys: dict[tuple[str, str], str] | None = None,
        now: int = 0,
    ) -> tuple[str, list[Any]]:
        """The check of a start written in one statement (``StartCommit._write_one``): each pair's
        ``expect_latest``, the claim of ``requests`` (request id -> instance id) if any, the claim
        of ``keys`` ((workflow, key) -> instance id; ``now`` in ms for the holders' windows) if
        any, then the transaction's id, as one row. A target list is evaluated in its order, so
        request ids are claimed before keys, as on the long way (``StartCommit._write``)."""
        calls = [self._expect_latest_call] * len(pairs)
        params: list[Any] = [value for pair in pairs for value in pair]
        if requests:
            keyed = sorted(requests)  # one order for every group: concurrent claims lock in it
            calls.append(self._claim_requests_call)
            params += [text_array(keyed), text_array([requests[r] for r in keyed])]
        if keys:
            held = sorted(keys)
            calls.append(self._claim_keys_call)
            params += [
                text_array([w for w, _ in held]),
                text_array([k for _, k in held]),
                text_array([keys[k] for k in held]),
                now,
            ]
        return f"SELECT {', '.join([*calls, 'pg_current_xact_id()::xid::text'])}", params


#: The SQLSTATE expect_latest raises (sql/0009_expect_latest.sql).
STALE_LATEST = "WG001"
#: The SQLSTATE claim_requests raises when a request id is taken (sql/0026_claim_requests.sql).
REQUEST_TAKEN = "WG004"
#: The SQLSTATE claim_keys raises when a deduplication key is held (sql/0027_claim_keys.sql).
KEY_HELD = "WG005"


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

    ``persist`` writes new instances inside the transaction; ``committed(created, written, xid)``
    runs after each commit with the instances it created, before the callers are answered:
    ``written``, those whose rows this transaction (``xid``) wrote (not an earlier attempt's whose
    acknowledgement was lost), as the store's state cache keeps them (state_cache.py).
    """

    MAX_ROWS = 1000  # instances committed together at most (a bigger job is committed alone)

    def __init__(
        self,
        db: Database,
        queries: StartQueries,
        persist: PersistNew,
        persist_checked: PersistChecked,
        committed: Callable[[list[NewInstance], list[NewInstance], str], None],
        stale: Callable[[str, str], None] = lambda name, version: None,
        linger: float = 0.0,
    ) -> None:
        self.db = db
        self.queries = queries
        self.persist = persist
        self.persist_checked = persist_checked
        self.committed = committed
        self.stale = stale  # called with (name, version) when expect_latest found a newer version
        # Two committers overlap one group's commit with the next one's work; more would only
        # take connections the mutations' committers and the claims need.
        self.committers = max(1, min(2, db.pool_size - 2))
        self._committers = Committers[_Job](self.committers, self.MAX_ROWS, _rows, self._run, linger)
        self.groups = 0  # transactions committed (for tests and the benchmark)
        # the workflow clock (ms), for deduplication windows; the store sets its own
        self.now: Callable[[], int] = lambda: 0

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
        attempt = _Attempt()
        created, answers, written, xid = await self.db.run(
            "start", functools.partial(self._transaction, items=items, attempt=attempt)
        )
        self.groups += 1
        self.committed(created, written, xid)
        out: list[list[str]] = []
        at = 0
        for job in batch:
            out.append(answers[at : at + len(job.items)])
            at += len(job.items)
        return out

    async def _transaction(
        self, conn: Conn, items: list[NewInstance], attempt: _Attempt
    ) -> tuple[list[NewInstance], list[str], list[NewInstance], str]:
        expected = _expected(items, frozenset())
        try:
            return await self._write(conn, items, attempt, expected)
        except psycopg.Error as exc:
            if exc.sqlstate != STALE_LATEST:
                raise
            for name, version in expected:  # which one is stale the error does not say: recheck all
                self.stale(name, version)
            raise StaleLatest(
                f"a newer version of {', '.join(n for n, _ in expected)} was registered"
            ) from None

    async def _write(
        self, conn: Conn, items: list[NewInstance], attempt: _Attempt, expected: list[tuple[str, str]]
    ) -> tuple[list[NewInstance], list[str], list[NewInstance], str]:
        """One attempt at the group's transaction: (the items it creates, the answer of each, the
        items whose rows it wrote, its transaction id)."""
        attempt.number += 1
        if attempt.number == 1:
            try:
                written = await self._write_one(conn, items, expected)
            except psycopg.Error as exc:
                if exc.sqlstate not in (REQUEST_TAKEN, KEY_HELD):
                    raise
                written = None  # a request id is taken or a key held: nothing was written
            if written is not None:
                return written
            # Claim with reads, below.
        async with transaction(conn) as pipeline:
            done: set[str] = set()
            if attempt.number == 1:
                await self._confirm_latest(conn, expected)  # fails the transaction if stale
            else:
                # A retry, perhaps after a lost acknowledgement: the earlier attempt's instances
                # exist if it committed (all of them: one transaction). Check only what is still
                # to insert (those are answered as committed, whatever was registered since).
                done = await self._stored(conn, pipeline, items)
                await self._confirm_latest(conn, _expected(items, done))
            requests = await self._claim_requests(conn, pipeline, items)
            holders = await self._claim_keys(conn, pipeline, _key_candidates(items, requests))
            plan = _resolve(items, requests, holders)
            if plan.redirected:
                await conn.execute(
                    self.queries.redirect_requests,
                    (list(plan.redirected), list(plan.redirected.values())),
                )
            fresh = [item for item in plan.created if item.state.instance.id not in done]
            xid_cur = None
            if fresh:
                await self.persist(conn, fresh)
                xid_cur = await conn.execute(self.queries.xid)
        row = await xid_cur.fetchone() if xid_cur is not None else None
        return plan.created, plan.answers, fresh, row[0] if row is not None else ""

    async def _write_one(
        self, conn: Conn, items: list[NewInstance], expected: list[tuple[str, str]]
    ) -> tuple[list[NewInstance], list[str], list[NewInstance], str] | None:
        """A first attempt: the versions' check, the claims of the request ids (each by the first
        item naming it) and of the deduplication keys (each by the first item holding it that its
        request id does not answer), the rows and the commit are one statement on the autocommit
        connection, its own transaction (writes.py ``write_one``). A taken request id raises
        REQUEST_TAKEN, a held key KEY_HELD (nothing written). A connection lost during it may
        have committed it: the attempt after it recognises its instances (``_stored``). None, with
        nothing sent, for a group in which a later start repeats an earlier one's key with a
        request id of its own: that id must name the key's holder (``redirect_requests``), which
        the long way does."""
        first = _first_requests(items)
        requests = {r: (i, False) for r, i in first.items()}
        keys = _key_candidates(items, requests)
        plan = _resolve(items, requests, keys)
        if plan.redirected:
            return None
        check = self.queries.one_statement_check(expected, first, keys, self.now())
        # a connection lost during it raises CommitUnknown (writes.py write_one)
        row = await self.persist_checked(conn, plan.created, check)
        return plan.created, plan.answers, plan.created, row[-1]

    async def _confirm_latest(self, conn: Conn, pairs: list[tuple[str, str]]) -> None:
        for name, version in pairs:
            await conn.execute(self.queries.expect_latest, (name, version))

    async def _stored(self, conn: Conn, pipeline: Pipeline, items: list[NewInstance]) -> set[str]:
        """The ids of ``items`` already stored (by an earlier attempt whose commit went through)."""
        cur = await conn.execute(self.queries.existing_instances, ([i.state.instance.id for i in items],))
        await pipeline.sync()
        return {row[0] for row in await cur.fetchall()}

    async def _claim_requests(
        self, conn: Conn, pipeline: Pipeline, items: list[NewInstance]
    ) -> dict[str, tuple[str, bool]]:
        """Claim the request ids of ``items``: request id -> (the instance that holds it, whether
        that answer was a deduplication). The first item of each id claims it; sorted, so two
        groups lock in one order."""
        first = _first_requests(items)
        if not first:
            return {}
        q = self.queries
        keyed = sorted(first)
        cur = await conn.execute(q.claim_requests, (keyed, [first[r] for r in keyed]))
        await pipeline.sync()
        owners = {r: (i, False) for r, i in await cur.fetchall()}
        taken = [r for r in keyed if r not in owners]
        if taken:
            cur = await conn.execute(q.request_owners, (taken,))
            await pipeline.sync()
            owners.update({r: (i, bool(d)) for r, i, d in await cur.fetchall()})
        return owners

    async def _claim_keys(
        self, conn: Conn, pipeline: Pipeline, candidates: dict[tuple[str, str], str]
    ) -> dict[tuple[str, str], str]:
        """Claim deduplication keys for their candidate instances: (workflow, key) -> holder."""
        if not candidates:
            return {}
        q = self.queries
        keys = sorted(candidates)
        workflows = [w for w, _ in keys]
        names = [k for _, k in keys]
        cur = await conn.execute(q.claim_keys, (workflows, names, [candidates[k] for k in keys], self.now()))
        await pipeline.sync()
        holders = {(w, k): i for w, k, i in await cur.fetchall()}
        held = [k for k in keys if k not in holders]
        if held:
            cur = await conn.execute(q.key_holders, ([w for w, _ in held], [k for _, k in held]))
            await pipeline.sync()
            holders.update({(w, k): i for w, k, i in await cur.fetchall()})
        return holders


class _Attempt:
    """Counts the attempts at one group's transaction (db.run may retry it)."""

    __slots__ = ("number",)

    def __init__(self) -> None:
        self.number = 0


def _first_requests(items: list[NewInstance]) -> dict[str, str]:
    """request id -> the instance of the first item naming it: the one that claims it."""
    first: dict[str, str] = {}
    for item in items:
        if item.request_id and item.request_id not in first:
            first[item.request_id] = item.state.instance.id
    return first


def _key_candidates(
    items: list[NewInstance], requests: dict[str, tuple[str, bool]]
) -> dict[tuple[str, str], str]:
    """(workflow, key) -> the first item that may take it: one not answered by its request id."""
    out: dict[tuple[str, str], str] = {}
    for item in items:
        inst = item.state.instance
        if not inst.dedup_key:
            continue
        owner = requests.get(item.request_id) if item.request_id else None
        if owner is not None and owner[0] != inst.id:
            continue  # answered by its request id
        out.setdefault((inst.workflow, inst.dedup_key), inst.id)
    return out


class _Plan:
    """What a group does: the items it creates, each item's answer, the request ids to point at
    a key's holder."""

    __slots__ = ("created", "answers", "redirected")

    def __init__(self) -> None:
        self.created: list[NewInstance] = []
        self.answers: list[str] = []
        self.redirected: dict[str, str] = {}


def _resolve(
    items: list[NewInstance],
    requests: dict[str, tuple[str, bool]],
    holders: dict[tuple[str, str], str],
) -> _Plan:
    """Each item's answer from the claimed request ids and keys (sets ``deduplicated``)."""
    plan = _Plan()
    requests = dict(requests)  # updated as an item's request id is pointed at a key's holder
    for item in items:
        item.deduplicated = False  # (an earlier attempt of the transaction may have set it)
        inst = item.state.instance
        rid = item.request_id
        if rid:
            owner = requests.get(rid)
            if owner is None:  # never expected: the row exists or this group claimed it
                raise Unavailable(f"start request {rid!r} was claimed and released; retry")
            if owner[0] != inst.id:
                plan.answers.append(owner[0])
                item.deduplicated = owner[1]
                continue
        if inst.dedup_key:
            holder = holders.get((inst.workflow, inst.dedup_key))
            if holder is None:  # never expected: the key was claimed or its holder read
                raise Unavailable(f"dedup key {inst.dedup_key!r} was claimed and released; retry")
            if holder != inst.id:
                plan.answers.append(holder)
                item.deduplicated = True
                if rid:
                    requests[rid] = (holder, True)
                    plan.redirected[rid] = holder
                continue
        plan.answers.append(inst.id)
        plan.created.append(item)
    return plan
