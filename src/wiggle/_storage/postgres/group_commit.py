"""Group commit: concurrent mutations share one transaction, each answered after its commit.

Concurrent mutations queue up and a committer task takes every queued mutation into one
transaction (instances locked in id order, so two committers never deadlock), applies them in
arrival order, writes the union of their changes and commits once. One group is committed at a
time by default (``group_commits``): what arrives meanwhile is the next group, so groups grow with
the load and a busy server commits fewer, larger transactions (docs/performance.md#group-commits). A mutation the engine refuses
(a WiggleError raised before any change) fails alone; a failed transaction fails every mutation
of its group, none half-applied. A group whose connection broke after its COMMIT was sent is not
run again (its outcome is unknown): its callers get UNAVAILABLE (db.py, CommitUnknown).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import psycopg

from ..._engine.state import ACTIVE_TOKEN_STATUSES, Changes, InstanceState, now_millis
from ...errors import NotFound, WiggleError
from ..base import Action, InstanceView, R, WorkflowRecord
from .codecs import N_INSTANCE, N_TOKEN, instance_from, text_array, token_from, token_seq
from .committers import Committers, fail
from .db import Conn, Database, transaction
from .state_cache import STALE, StateCache
from .statements import Queries

# A group's states as this server last wrote them: (states, their xmins, their prints).
Kept = tuple[dict[str, InstanceState], dict[str, dict[str, str]], list[str]]

__all__ = ["GroupCommit", "Items", "Persist", "WriteChecked", "finished_view", "send_locked_read"]

# The changed instances of a transaction: (state, its changes, its context as loaded).
Items = list[tuple[InstanceState, Changes, Any]]
# Write ``items`` on a connection inside its transaction, given the ids of the tokens that exist.
Persist = Callable[[Conn, Items, "set[str] | frozenset[str]"], Awaitable[bool]]
# Check kept states (their ids and prints), write ``items`` and commit, in one statement on an
# autocommit connection: this transaction's id, and whether there was anything to write.
WriteChecked = Callable[
    [Conn, Items, "set[str] | frozenset[str]", list[str], list[str]], Awaitable[tuple[str, bool]]
]


class _Job:
    """One queued mutation: which instance, what to do, and whom to answer after the commit."""

    __slots__ = ("instance_id", "missing", "action", "future")

    def __init__(
        self, instance_id: str, missing: str, action: Action[Any], future: asyncio.Future[Any]
    ) -> None:
        self.instance_id = instance_id
        self.missing = missing
        self.action = action
        self.future = future


def _one(job: _Job) -> int:
    return 1  # a group is counted in mutations


def finished_view(state: InstanceState) -> InstanceView:
    """What a read of the instance would return right after the commit that wrote ``state``: its
    row and its active tokens in id order (codecs.py ``views``). Handed to the waiters of a
    finished instance (notifier.py ``instance_finished``), which then need no read of their own."""
    tokens = [t for t in state.tokens.values() if t.status in ACTIVE_TOKEN_STATUSES]
    tokens.sort(key=token_seq)
    return InstanceView(msgspec.structs.replace(state.instance), tokens)


async def send_locked_read(conn: Conn, queries: Queries, ids: list[str]) -> tuple[Any, Any]:
    """Send, in the caller's pipeline, the lock and read of the instances ``ids`` and the read of
    their active tokens; the two cursors, to fetch after the pipeline's sync. The group commit's
    read (``GroupCommit._read``) and a workflow limit's admission (workflow_limits.py) both read
    so. The ids go as one text[] literal (codecs.py text_array): psycopg adapts a list element by
    element."""
    id_array = text_array(ids)
    cur_i = await conn.execute(queries.lock_instances, (id_array,), binary=True)
    if len(ids) == 1:
        cur_t = await conn.execute(queries.active_tokens_one, (ids[0],), binary=True)
    else:
        cur_t = await conn.execute(queries.active_tokens_many, (id_array,), binary=True)
    return cur_i, cur_t


class GroupCommit:
    """The committer tasks and their queue (committers.py), over ``db``.

    ``load_definition`` reads a definition version on the transaction's connection; ``persist``
    writes a group's changes inside the transaction, ``write_checked`` those of a group on kept
    states in the statement that checks them (writes.py); ``committed(wrote, announce, finished)`` runs after
    each commit, before the callers are answered (``finished``: the view of each instance the
    group finished, ``finished_view``).
    """

    MAX_GROUP = 128  # mutations committed together at most
    #: Tests: a group run on kept states also reads them and fails unless they are equal.
    verify_kept = False

    def __init__(
        self,
        db: Database,
        queries: Queries,
        load_definition: Callable[[Conn, str, str], Awaitable[WorkflowRecord]],
        persist: Persist,
        write_checked: WriteChecked,
        committed: Callable[[bool, list[tuple[str, Changes]], dict[str, InstanceView]], None],
        group_commits: int = 1,
    ) -> None:
        self.db = db
        self.queries = queries
        self.load_definition = load_definition
        self.persist = persist
        self.write_checked = write_checked
        self.committed = committed
        # Where an action's ``now`` comes from: the store's clock (wiggle/_clock.py) once it sets it.
        self.now: Callable[[], int] = now_millis
        # Groups in flight at once (the server's group_commits setting), each on a connection of its
        # own, leaving two of the pool to the claims and the starts. More than one lets a report
        # that arrives during a commit start its own transaction at once, in a smaller group:
        # more transactions for the same reports, which measured slower and dearer under load
        # (bench/README.md, "Round twenty-nine").
        self.committers = max(1, min(group_commits, db.pool_size - 2))
        self._committers = Committers[_Job](self.committers, self.MAX_GROUP, _one, self._run)
        # What this server last wrote of each instance (state_cache.py); None: always read.
        self.cache: StateCache | None = StateCache()

    async def submit(self, instance_id: str, missing: str, action: Action[R]) -> tuple[R, InstanceState]:
        """Queue ``action`` on ``instance_id``; its result and the state once committed."""
        job = _Job(instance_id, missing, action, asyncio.get_running_loop().create_future())
        self._committers.submit(job)
        result, state = await job.future
        return result, state

    async def close(self) -> None:
        """Stop the committers; queued mutations fail with Unavailable."""
        await self._committers.close()

    async def _run(self, batch: list[_Job]) -> None:
        """Commit one group and answer its jobs (committers.py calls this)."""
        try:
            # Not re-run after a COMMIT of unknown outcome: an action applied twice (a signal
            # without an id) is worse than an UNAVAILABLE the caller may repeat (db.py).
            outcomes = await self.db.run(
                "commit", functools.partial(self._commit_group, batch=batch), retry_unknown_commit=False
            )
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # Unavailable, or a bug: every job of the group learns it
            fail(batch, exc)
            return
        wrote, announce, finished, results = outcomes
        self.committed(wrote, announce, finished)
        for job, outcome in zip(batch, results, strict=True):
            if job.future.done():
                continue
            if isinstance(outcome, BaseException):
                job.future.set_exception(outcome)
            else:
                job.future.set_result(outcome)

    async def _commit_group(
        self, conn: Conn, batch: list[_Job]
    ) -> tuple[bool, list[tuple[str, Changes]], dict[str, InstanceView], list[Any]]:
        ids = sorted({job.instance_id for job in batch})
        cache = self.cache
        if cache is not None:
            kept = cache.take(ids)
            if kept is not None:  # this server wrote them last: check, write and commit in one trip
                try:
                    return await self._apply(conn, batch, ids, kept)
                except psycopg.Error as exc:
                    if exc.sqlstate != STALE:
                        raise
                    cache.checked(True, ids)  # changed since: read them (the group is run again)
        return await self._apply(conn, batch, ids, None)

    async def _apply(
        self, conn: Conn, batch: list[_Job], ids: list[str], kept: Kept | None
    ) -> tuple[bool, list[tuple[str, Changes]], dict[str, InstanceView], list[Any]]:
        """One transaction for ``batch``: on the instances as read under their locks, or (``kept``)
        as this server last wrote them, checked by ``expect_unchanged`` (state_cache.py)."""
        if kept is not None:
            return await self._apply_kept(conn, batch, ids, kept)
        async with transaction(conn) as pipeline:
            states, before, xid = await self._read(conn, pipeline, ids)
            existing = {t for st in states.values() for t in st.tokens}  # before the actions
            results, merged = await self._act(conn, batch, states)
            items = [(states[iid], changes, originals) for iid, changes, originals in merged]
            wrote = await self.persist(conn, items, existing)
        cache = self.cache
        if cache is not None:
            for iid, changes, _ in merged:
                cache.keep(states[iid], changes, before[iid], xid)
            written = {iid for iid, _, _ in merged}
            # an instance read and not written: what its actions did is not kept
            cache.forget(iid for iid in states if iid not in written)
        return self._outcome(wrote, states, merged, results)

    async def _apply_kept(
        self, conn: Conn, batch: list[_Job], ids: list[str], kept: Kept
    ) -> tuple[bool, list[tuple[str, Changes]], dict[str, InstanceView], list[Any]]:
        """The group on the states this server kept: its actions run on them, then the check, the
        writes and the commit are one statement (writes.py ``write_checked``: one round trip, no
        transaction block). A stale print raises STALE and nothing is written."""
        states, before, prints = kept
        if self.verify_kept:
            await self._verify(conn, ids, states, before)
        existing = {t for st in states.values() for t in st.tokens}  # before the actions
        results, merged = await self._act(conn, batch, states)
        items = [(states[iid], changes, originals) for iid, changes, originals in merged]
        # its own commit: a connection lost during it raises CommitUnknown (writes.py write_one)
        xid, wrote = await self.write_checked(conn, items, existing, ids, prints)
        cache = self.cache
        if cache is not None:
            cache.checked(False, ids)
            for iid, changes, _ in merged:
                cache.keep(states[iid], changes, before[iid], xid)
        return self._outcome(wrote, states, merged, results)

    async def _act(
        self, conn: Conn, batch: list[_Job], states: dict[str, InstanceState]
    ) -> tuple[list[Any], list[tuple[str, Changes, Any]]]:
        """Run the group's actions in arrival order on ``states``: each job's result (or the error
        the engine refused it with) and, per instance changed, its merged changes and its
        context as loaded."""
        originals = {iid: st.instance.context for iid, st in states.items()}
        results: list[Any] = []
        merged: dict[str, Changes] = {}
        for job in batch:
            state = states.get(job.instance_id)
            if state is None:
                results.append(NotFound(job.missing))
                continue
            record = await self.load_definition(conn, state.instance.workflow, state.instance.version)
            try:
                result, changes = job.action(record.loaded, state, self.now())
            except WiggleError as exc:
                results.append(exc)  # validated before any change: nothing to undo
                continue
            results.append((result, state))
            if changes is None:
                continue
            into = merged.get(job.instance_id)
            if into is None:
                merged[job.instance_id] = changes
            else:
                into.absorb(changes)
        return results, [(iid, changes, originals[iid]) for iid, changes in merged.items()]

    @staticmethod
    def _outcome(
        wrote: bool,
        states: dict[str, InstanceState],
        merged: list[tuple[str, Changes, Any]],
        results: list[Any],
    ) -> tuple[bool, list[tuple[str, Changes]], dict[str, InstanceView], list[Any]]:
        finished = {iid: finished_view(states[iid]) for iid, changes, _ in merged if changes.finished}
        return wrote, [(iid, changes) for iid, changes, _ in merged], finished, results

    async def _read(
        self, conn: Conn, pipeline: Any, ids: list[str]
    ) -> tuple[dict[str, InstanceState], dict[str, dict[str, str]], str]:
        """The instances of ``ids`` locked and read with their active tokens; each one's xmins
        ("" its row's, else by token id) and this transaction's id."""
        cur_i, cur_t = await send_locked_read(conn, self.queries, ids)
        await pipeline.sync()
        states: dict[str, InstanceState] = {}
        before: dict[str, dict[str, str]] = {}
        xid = ""
        for row in await cur_i.fetchall():
            instance = instance_from(row)
            states[instance.id] = InstanceState(instance, {})
            before[instance.id] = {"": row[N_INSTANCE]}
            xid = row[N_INSTANCE + 1]
        rows = await cur_t.fetchall()
        for row, token in sorted(((r, token_from(r)) for r in rows), key=lambda rt: token_seq(rt[1])):
            st = states.get(token.instance_id)
            if st is not None:
                st.tokens[token.id] = token
                before[token.instance_id][token.id] = row[N_TOKEN]
        return states, before, xid

    async def _verify(
        self,
        conn: Conn,
        ids: list[str],
        states: dict[str, InstanceState],
        before: dict[str, dict[str, str]],
    ) -> None:
        """Tests (``verify_kept``): before the group's statement, read the instances (in a
        transaction of their own); each one whose xmins are the kept ones (no transaction changed
        it since this server wrote it, so the statement's check will pass) must be equal to the
        kept state. One that changed since is left to the check, which fails it."""
        async with transaction(conn) as pipeline:
            read, read_before, _ = await self._read(conn, pipeline, ids)
        for iid in ids:
            got, want = read.get(iid), states[iid]
            if got is None or read_before[iid] != before[iid]:
                continue
            if got.instance != want.instance or got.tokens != want.tokens:
                raise AssertionError(f"kept state of {iid} differs from the database's: {want!r} != {got!r}")
