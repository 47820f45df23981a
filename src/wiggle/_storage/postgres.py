"""The PostgreSQL store: production storage, and what lets several servers form a cluster.

Every mutation is one transaction under the instance row lock (``SELECT ... FOR UPDATE``): load
the instance and its active tokens, run the transition the instance layer hands over
(wiggle/_server/instances.py), write what it changed, commit, then wake whoever waits. Statements of a transaction are pipelined: a mutation costs two round
trips (lock + load, then writes + COMMIT). Claims take due READY tokens with ``FOR UPDATE SKIP
LOCKED`` on the token *and* its instance row, so a claim never waits for (nor deadlocks with) a
mutation in progress and never hands one token to two workers.

Several server processes on one database cooperate through PostgreSQL only:

- ``LISTEN``/``NOTIFY`` wake long-polling workers, instance waiters and the clock duty on every
  node (one background listener connection per store, reconnected when it drops). A node sends
  NOTIFYs only while another node of its schema is connected (see ``_count_peers``): a lone
  server, the common case, spares PostgreSQL the notification queue and its listener wake-ups;
- the clock duties (timers, lease expiry, user-task deadlines) run on the one node holding a
  session-level advisory lock on a dedicated connection; when that node dies its session ends,
  the lock is released and another node takes over at its next tick. Each duty action re-checks
  the token under the instance lock, so even two leaders at once could not fire a timer twice.

Transient database errors (serialization failures, deadlocks, a lost connection) are retried a
bounded number of times; then the call fails with ``Unavailable`` (gRPC UNAVAILABLE). No raw
psycopg error leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .._engine.engine import Claimed, LoadedDefinition
from .._engine.state import Changes, HistoryEntry, InstanceState, now_millis
from .._model import definition_from_json, validate_name
from ..errors import NotFound, Unavailable, WiggleError
from .base import Action, ClaimTransition, InstanceQuery, InstanceView, R, Store, WorkflowRecord, ready_counts
from .pg_schema import (  # the schema side: migrations, statements, row codecs
    _I_JOINS,
    _INSTANCE_UPDATED,
    _KEEPALIVES,
    _N_TOKEN,
    ID_CLOCK_SLACK_MILLIS,
    Conn,
    SchemaTooNew,
    T,
    _app_prefix,
    _check_schema,
    _encode,
    _instance_from,
    _instance_row,
    _lock_key,
    _Queries,
    _short,
    _token_from,
    _token_row,
    _token_seq,
    _token_update,
    _views,
    migrate,
    migration_files,
)

__all__ = ["PostgresStore", "SchemaTooNew", "migrate", "migration_files"]

log = logging.getLogger("wiggle.postgres")


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


class PostgresStore(Store):
    """Definitions, instances, tokens and history in PostgreSQL (``schema``, default "wiggle").

    ``pool_size`` bounds the connections of this process's pool; the store also keeps one
    LISTEN connection and, on demand, one clock-leadership connection. ``acquire_timeout`` is
    how long a call waits for a pooled connection and ``max_attempts`` how often a transient
    failure is tried before the call fails with Unavailable.
    """

    MAX_GROUP = 128  # mutations committed together at most
    PEER_CHECK_SECONDS = 2.0  # how often the listener recounts the other nodes on the schema
    # From this many rows of a kind on, a commit writes them with one set-based statement (unnest
    # of one array per column) instead of a pipelined statement per row. Measured: per row it
    # costs the server process ~15% less at 8 rows and ~40% less at 32, PostgreSQL about the
    # same; below 8 rows the array handling costs more than the statements it saves.
    SET_WRITE_MIN_ROWS = 8

    def __init__(
        self,
        url: str,
        schema: str = "wiggle",
        pool_size: int = 10,
        *,
        acquire_timeout: float = 5.0,
        max_attempts: int = 3,
    ) -> None:
        super().__init__()
        self.url = url
        self.schema = _check_schema(schema)
        self.pool_size = max(1, pool_size)
        self.clock_parallelism = max(1, self.pool_size // 2)
        self.acquire_timeout = acquire_timeout
        self.max_attempts = max(1, max_attempts)
        self.node_id = os.urandom(6).hex()  # tags our own NOTIFYs, so the listener skips them
        # Every connection of this node is named application_name + role suffix: the peer count
        # of other nodes looks for these names.
        self.app_prefix = _app_prefix(schema)
        self.application_name = f"{self.app_prefix}{self.node_id}"
        self.peers = 0  # other nodes on this schema, as last counted (NOTIFY only when > 0)
        self.notifies_sent = 0  # NOTIFY statements sent (for tests and diagnostics)
        self._q = _Queries(schema)
        self._records: dict[tuple[str, str], WorkflowRecord] = {}
        self._pool: AsyncConnectionPool | None = None
        self._listener: asyncio.Task[None] | None = None
        self._leader_conn: Conn | None = None
        self._leader = False
        self._leader_lock = asyncio.Lock()
        self._clock_key = _lock_key("clock", schema)
        # Group-commit committers: enough to overlap one group's commit with the next one's work.
        self.committers = max(1, min(4, self.pool_size - 2))
        self._jobs: asyncio.Queue[_Job] = asyncio.Queue()
        self._committers: set[asyncio.Task[None]] = set()
        prefix = schema[:48]
        self.channel_work = f"{prefix}_work"
        self.channel_finished = f"{prefix}_finished"
        self.channel_clock = f"{prefix}_clock"
        self.channel_peers = f"{prefix}_peers"  # "a node joined": count it at once

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self._pool is not None:
            return
        await self._retry_connect("migrating", lambda: migrate(self.url, self.schema))
        pool: AsyncConnectionPool = AsyncConnectionPool(
            self.url,
            min_size=min(2, self.pool_size),
            max_size=self.pool_size,
            open=False,
            timeout=self.acquire_timeout,
            # autocommit: a read is one statement, one round trip; mutations open their own transactions
            kwargs={"application_name": self.application_name, "autocommit": True, **_KEEPALIVES},
            name=f"wiggle-{self.node_id}",
        )
        try:
            await pool.open(wait=True, timeout=max(self.acquire_timeout, 1.0))
        except psycopg.OperationalError as exc:
            await pool.close()
            raise Unavailable(f"database unavailable: {_short(exc)}") from exc
        self._pool = pool
        try:
            conn = await self._retry_connect("listening", self._listen_connection)
        except BaseException:
            await self.close()
            raise
        self._listener = asyncio.ensure_future(self._listen_forever(conn))

    async def close(self) -> None:
        for task in list(self._committers):
            task.cancel()
        for task in list(self._committers):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._committers.clear()
        while not self._jobs.empty():
            job = self._jobs.get_nowait()
            if not job.future.done():
                job.future.set_exception(Unavailable("the store is closing"))
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        async with self._leader_lock:
            await self._drop_leadership()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @property
    def is_clock_leader(self) -> bool:
        """True while this store holds the clock-duty advisory lock."""
        return self._leader

    async def _retry_connect(self, what: str, connect: Callable[[], Awaitable[T]]) -> T:
        delay = 0.05
        for attempt in range(1, self.max_attempts + 1):
            try:
                return await connect()
            except Unavailable as exc:
                last: BaseException = exc
            except psycopg.OperationalError as exc:
                last = exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        log.warning("database unavailable while %s: %s", what, last)
        message = str(last) if isinstance(last, Unavailable) else f"database unavailable: {_short(last)}"
        raise Unavailable(message) from last

    # ------------------------------------------------------------------ cross-node wake-ups

    async def _listen_connection(self) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self.url,
            autocommit=True,
            connect_timeout=10,
            application_name=f"{self.application_name}:listen",
            **_KEEPALIVES,
        )
        try:
            for channel in (self.channel_work, self.channel_finished, self.channel_clock, self.channel_peers):
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            # Say hello (the nodes already there start notifying at once, not at their next
            # count) and count them: from here on this node hears what they commit.
            await self._count_peers(conn, hello=True)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _count_peers(self, conn: Conn, hello: bool = False) -> None:
        """Count the other live nodes on this schema (the listener's periodic check).

        Trade-off: a node sends NOTIFYs only while it knows of a peer. A node that joins says
        hello on the peers channel, which the others hear within milliseconds; should that be
        missed (a listener reconnecting), the join is noticed at the next count, within
        PEER_CHECK_SECONDS (~2 s), and until then the newcomer's pollers may miss wake-ups from
        the others' commits and find that work at their next poll instead. A node that left is
        dropped at the next count (until then the others send NOTIFYs nobody needs).
        """
        params = {"prefix": self.app_prefix + "%", "node": self.node_id}
        if hello:
            cur = await conn.execute(
                f"SELECT ({self._q.count_peers}), pg_notify(%(channel)s, %(node)s)",
                {**params, "channel": self.channel_peers},
            )
        else:
            cur = await conn.execute(self._q.count_peers, params)
        row = await cur.fetchone()
        peers = int(row[0]) if row else 0
        if peers != self.peers:
            log.debug("schema %s: %d other node(s) connected", self.schema, peers)
        # Hellos that arrived meanwhile are dispatched after this (psycopg keeps them in order).
        self.peers = peers

    async def _listen_forever(self, conn: Conn | None) -> None:
        delay = 0.1
        loop = asyncio.get_running_loop()
        while True:
            try:
                if conn is None:
                    conn = await self._listen_connection()
                    log.info("notification listener reconnected")
                    self.notifier.wake_all()  # we may have missed notifications while disconnected
                    delay = 0.1
                while True:
                    interval = self.PEER_CHECK_SECONDS
                    until = loop.time() + interval
                    async with contextlib.aclosing(conn.notifies(timeout=interval)) as notes:
                        async for note in notes:
                            self._dispatch(note.channel, note.payload)
                            if loop.time() >= until:
                                break  # a steady stream must not postpone the count
                    await self._count_peers(conn)  # and a silent network failure shows up here
            except asyncio.CancelledError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                raise
            except Exception as exc:
                log.warning("notification listener lost its connection (%s); reconnecting", _short(exc))
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                conn = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _dispatch(self, channel: str, payload: str) -> None:
        node, _, value = payload.partition(":")
        if node == self.node_id:
            return  # announced locally right after our own commit
        if channel == self.channel_work:
            self.notifier.work_ready((value,))  # how many tokens is not known here: wake all
        elif channel == self.channel_finished:
            self.notifier.instance_finished(value)
        elif channel == self.channel_clock and self._leader:
            self.notifier.clock_changed()  # only the leader's clock loop has anything to re-plan
        elif channel == self.channel_peers:
            self.peers = max(self.peers, 1)  # a node joined: notify from now on (recounted soon)

    def _announce(self, instance_id: str, changes: Changes) -> None:
        if changes.ready_queues:
            self.notifier.work_ready(changes.ready_queues, ready_counts(changes))
        if changes.timers:
            self.notifier.clock_changed()
        if changes.finished:
            self.notifier.instance_finished(instance_id)

    def _notifications(
        self, instance_id: str, changes: Changes, channels: list[str], payloads: list[str]
    ) -> None:
        if not self.peers:
            return  # nobody else listens: _announce wakes this node's own waiters after the commit
        for queue in changes.ready_queues:
            channels.append(self.channel_work)
            payloads.append(f"{self.node_id}:{queue}")
        if changes.timers:
            channels.append(self.channel_clock)
            payloads.append(self.node_id)
        if changes.finished:
            channels.append(self.channel_finished)
            payloads.append(f"{self.node_id}:{instance_id}")

    # ------------------------------------------------------------------ transactions

    async def _run(self, what: str, body: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``body`` on a pooled connection, retrying transient failures; Unavailable at the end."""
        pool = self._pool
        if pool is None:
            raise Unavailable(f"the PostgreSQL store is not open ({what})")
        delay = 0.02
        last: BaseException | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with pool.connection() as conn:
                    return await body(conn)
            except WiggleError:
                raise
            except PoolTimeout as exc:
                # No connection for acquire_timeout seconds: the database is down (the pool keeps
                # reconnecting in the background). Waiting as long again per attempt would only
                # delay the UNAVAILABLE that callers retry on.
                raise Unavailable(
                    f"database unavailable: no connection within {self.acquire_timeout:g} s ({_short(exc)})"
                ) from exc
            except pg_errors.TransactionRollback as exc:  # serialization failure, deadlock
                last = exc
                log.debug("%s: transaction rolled back (%s), attempt %d", what, _short(exc), attempt)
            except psycopg.OperationalError as exc:  # connection lost, server shutting down, pool timeout
                last = exc
                log.warning(
                    "%s: database error (%s), attempt %d of %d", what, _short(exc), attempt, self.max_attempts
                )
                if attempt < self.max_attempts:
                    with contextlib.suppress(Exception):
                        await pool.check()  # drop the pool's other dead connections before retrying
            except psycopg.Error as exc:
                log.exception("%s: unexpected database error", what)
                raise WiggleError(f"database error in {what}: {_short(exc)}") from exc
            if attempt < self.max_attempts:
                await asyncio.sleep(delay)
                delay *= 4
        raise Unavailable(f"database unavailable: {_short(last) if last else what}") from last

    async def _fetch(self, what: str, query: str, params: Any = None, binary: bool = False) -> list[Any]:
        """The rows of one statement (autocommit: its own snapshot, one round trip)."""

        async def body(conn: Conn) -> list[Any]:
            cur = await conn.execute(query, params, binary=binary)
            return await cur.fetchall()

        return await self._run(what, body)

    async def _loaded_record(self, conn: Conn, name: str, version: str) -> WorkflowRecord:
        record = self._records.get((name, version))
        if record is None:
            cur = await conn.execute(self._q.definition, (name, version), binary=True)
            row = await cur.fetchone()
            if row is None:
                raise NotFound(f"workflow {name!r} has no version {version!r}")
            record = self._cache(name, version, row[0], row[1])
        return record

    def _cache(self, name: str, version: str, data: bytes, registered_at: int) -> WorkflowRecord:
        record = self._records.get((name, version))
        if record is None:
            record = WorkflowRecord(
                LoadedDefinition(definition_from_json(bytes(data)), version), registered_at
            )
            self._records[(name, version)] = record
        return record

    async def _write(
        self,
        conn: Conn,
        state: InstanceState,
        changes: Changes,
        existing: set[str] | frozenset[str],
        original_context: Any,
        channels: list[str],
        payloads: list[str],
    ) -> bool:
        """Queue the statements persisting ``changes`` (pipeline mode); False if there was nothing to write."""
        return await self._write_many(
            conn, [(state, changes, original_context)], existing, channels, payloads
        )

    async def _write_many(
        self,
        conn: Conn,
        items: list[tuple[InstanceState, Changes, Any]],
        existing: set[str] | frozenset[str],
        channels: list[str],
        payloads: list[str],
    ) -> bool:
        """Persist the changes of several instances with one statement per kind of row."""
        q = self._q
        new_instances: list[Any] = []
        keep_context: list[Any] = []
        with_context: list[Any] = []
        token_updates: list[Any] = []
        token_inserts: list[Any] = []
        history: list[Any] = []
        for state, changes, original_context in items:
            inst = state.instance
            if changes.created:
                new_instances.append(_instance_row(inst))
            elif changes.instance_changed:
                values = list(msgspec.structs.astuple(inst))
                values[_I_JOINS] = _encode(inst.joins)
                common = [values[i] for i in _INSTANCE_UPDATED]
                # The engine replaces the context, never edits it in place (advance_run relies on it too).
                if inst.context is original_context:
                    keep_context.append((*common, inst.id))
                else:
                    with_context.append((*common, _encode(inst.context), inst.id))
            for t in changes.tokens.values():
                if t.id in existing:
                    token_updates.append(_token_update(t))
                else:
                    token_inserts.append(_token_row(t))
            history.extend(msgspec.structs.astuple(h) for h in changes.history)
            self._notifications(inst.id, changes, channels, payloads)
        for one, many, rows in (
            (q.insert_instance, q.insert_instances, new_instances),
            (q.update_instance_keep_context, q.update_instances_keep_context, keep_context),
            (q.update_instance, q.update_instances, with_context),
            (q.update_token, q.update_tokens, token_updates),
            (q.insert_token, q.insert_tokens, token_inserts),
            (q.insert_history, q.insert_histories, history),
        ):
            if len(rows) >= self.SET_WRITE_MIN_ROWS:
                await conn.execute(many.statement, many.params(rows))
            elif len(rows) == 1:
                await conn.execute(one, rows[0])
            elif rows:
                await conn.cursor().executemany(one, rows)
        return bool(
            new_instances or keep_context or with_context or token_updates or token_inserts or history
        )

    async def mutate(self, instance_id: str, missing: str, action: Action[R]) -> tuple[R, InstanceState]:
        """Lock the instance, load its active tokens, run ``action``, persist, commit, announce.

        Group commit: concurrent mutations queue up and a few committer tasks each take every
        queued mutation into one transaction (instances locked in id order, so two committers
        never deadlock), apply them in arrival order, write the union of their changes and
        commit once. Every caller is answered only after that commit.
        """
        if not instance_id:
            raise NotFound(missing)
        job = _Job(instance_id, missing, action, asyncio.get_running_loop().create_future())
        self._jobs.put_nowait(job)
        if len(self._committers) < self.committers:
            self._committers.add(asyncio.ensure_future(self._committer()))
        result, state = await job.future
        return result, state

    async def _committer(self) -> None:
        jobs = self._jobs
        while True:
            first = await jobs.get()
            batch = [first]
            while len(batch) < self.MAX_GROUP and not jobs.empty():
                batch.append(jobs.get_nowait())
            try:
                outcomes = await self._run("commit", functools.partial(self._commit_group, batch=batch))
            except asyncio.CancelledError:
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(Unavailable("the store is closing"))
                raise
            except BaseException as exc:  # Unavailable, or a bug: every job of the group learns it
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(exc)
                continue
            wrote, announce, results = outcomes
            if wrote:
                self.stats.transactions += 1
            for instance_id, changes in announce:
                self._announce(instance_id, changes)
            for job, outcome in zip(batch, results, strict=True):
                if job.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)

    async def _commit_group(
        self, conn: Conn, batch: list[_Job]
    ) -> tuple[bool, list[tuple[str, Changes]], list[Any]]:
        q = self._q
        ids = sorted({job.instance_id for job in batch})
        results: list[Any] = []
        announce: list[tuple[str, Changes]] = []
        channels: list[str] = []
        payloads: list[str] = []
        wrote = False
        async with conn.pipeline() as pipeline:
            async with conn.transaction():
                cur_i = await conn.execute(q.lock_instances, (ids,), binary=True)
                cur_t = await conn.execute(q.active_tokens_many, (ids,), binary=True)
                await pipeline.sync()
                states: dict[str, InstanceState] = {}
                for row in await cur_i.fetchall():
                    instance = _instance_from(row)
                    states[instance.id] = InstanceState(instance, {})
                for token in sorted((_token_from(r) for r in await cur_t.fetchall()), key=_token_seq):
                    st = states.get(token.instance_id)
                    if st is not None:
                        st.tokens[token.id] = token
                existing = {token_id for st in states.values() for token_id in st.tokens}
                originals = {iid: st.instance.context for iid, st in states.items()}
                merged: dict[str, Changes] = {}
                for job in batch:
                    state = states.get(job.instance_id)
                    if state is None:
                        results.append(NotFound(job.missing))
                        continue
                    record = await self._loaded_record(conn, state.instance.workflow, state.instance.version)
                    try:
                        result, changes = job.action(record.loaded, state, now_millis())
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
                items = [(states[iid], changes, originals[iid]) for iid, changes in merged.items()]
                wrote = await self._write_many(conn, items, existing, channels, payloads)
                announce.extend(merged.items())
                if channels:
                    unique = dict.fromkeys(zip(channels, payloads, strict=True))
                    await conn.execute(q.notify, ([c for c, _ in unique], [p for _, p in unique]))
                    self.notifies_sent += 1
        return wrote, announce, results

    # ------------------------------------------------------------------ definitions

    async def put_definition(self, loaded: LoadedDefinition) -> tuple[WorkflowRecord, bool]:
        definition = loaded.definition
        key = (definition.name, loaded.version)
        cached = self._records.get(key)
        if cached is not None:
            return cached, False

        async def body(conn: Conn) -> tuple[WorkflowRecord, bool]:
            cur = await conn.execute(
                self._q.insert_definition, (definition.name, loaded.version, loaded.json, now_millis())
            )
            row = await cur.fetchone()
            if row is not None:
                return self._records.setdefault(key, WorkflowRecord(loaded, row[0])), True
            cur = await conn.execute(self._q.definition, key, binary=True)
            existing = await cur.fetchone()
            if existing is None:  # pragma: no cover - definitions are never deleted
                raise NotFound(f"workflow {definition.name!r} has no version {loaded.version!r}")
            return self._cache(definition.name, loaded.version, existing[0], existing[1]), False

        record, created = await self._run("register", body)
        if created:
            self.stats.transactions += 1
        return record, created

    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        validate_name(name, "workflow")
        if version and (name, version) in self._records:
            return self._records[(name, version)]

        async def body(conn: Conn) -> WorkflowRecord:
            wanted = version
            if not wanted:
                cur = await conn.execute(self._q.latest_version, (name,))
                row = await cur.fetchone()
                if row is None:
                    raise NotFound(f"workflow {name!r} is not registered")
                wanted = row[0]
                if (name, wanted) in self._records:
                    return self._records[(name, wanted)]
            cur = await conn.execute(self._q.definition, (name, wanted), binary=True)
            row = await cur.fetchone()
            if row is not None:
                return self._cache(name, wanted, row[0], row[1])
            cur = await conn.execute(self._q.latest_version, (name,))
            if await cur.fetchone() is None:
                raise NotFound(f"workflow {name!r} is not registered")
            raise NotFound(f"workflow {name!r} has no version {wanted!r}")

        return await self._run("get_workflow", body)

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        rows = await self._fetch("list_workflows", self._q.definitions, (name, name), binary=True)
        return [self._cache(r[0], r[1], r[3], r[2]) for r in rows]

    # ------------------------------------------------------------------ instances

    async def insert(self, state: InstanceState, changes: Changes) -> None:
        instance_id = state.instance.id
        attempts = 0

        async def body(conn: Conn) -> bool:
            nonlocal attempts
            attempts += 1
            channels: list[str] = []
            payloads: list[str] = []
            try:
                async with conn.pipeline():
                    async with conn.transaction():
                        await self._write(conn, state, changes, frozenset(), None, channels, payloads)
                        if channels:
                            await conn.execute(self._q.notify, (channels, payloads))
                            self.notifies_sent += 1
            except pg_errors.UniqueViolation:
                if attempts > 1:
                    return False  # an earlier attempt did commit (its acknowledgement was lost)
                raise
            return True

        if await self._run("start", body):
            self.stats.transactions += 1
            self._announce(instance_id, changes)

    async def get_instance(self, instance_id: str) -> InstanceView:
        views = _views(await self._fetch("get_instance", self._q.view, (instance_id,), binary=True))
        if not views:
            raise NotFound(f"instance {instance_id} does not exist")
        return views[0]

    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        size = max(query.page_size, 1)
        conds: list[str] = []
        params: list[Any] = []
        for cond, value in (
            ("id < %s", query.page_token),
            ("workflow = %s", query.workflow),
            ("status = %s", query.status),
            # the redundant "<> ''" lets even a generic plan use the partial index
            ("correlation_id = %s AND correlation_id <> ''", query.correlation_id),
            ("created_at >= %s", query.created_after),
            ("created_at < %s", query.created_before),
        ):
            if value:
                conds.append(cond)
                params.append(value)
        # Instance ids start with their creation millisecond (new_instance_id), taken just before
        # created_at: id bounds let the primary key skip finished rows outside the time range.
        if query.created_after:
            conds.append("id >= %s")
            params.append(f"wi-{max(query.created_after - ID_CLOCK_SLACK_MILLIS, 0):012x}")
        if query.created_before:
            conds.append("id < %s")
            params.append(f"wi-{query.created_before:012x}")
        text = self._q.list_instances.replace("{where}", " AND ".join(conds) or "TRUE")
        params.append(size + 1)
        views = _views(await self._fetch("list_instances", text, params, binary=True))
        if len(views) > size:
            views = views[:size]
            return views, views[-1].instance.id
        return views, ""

    async def history(self, instance_id: str) -> list[HistoryEntry]:
        rows = await self._fetch("history", self._q.history, (instance_id,))
        if not rows and not await self._fetch("history", self._q.instance_exists, (instance_id,)):
            raise NotFound(f"instance {instance_id} does not exist")
        return [HistoryEntry(*r) for r in rows]

    # ------------------------------------------------------------------ workers

    async def claim(
        self, worker_id: str, queues: list[str], max_tasks: int, transition: ClaimTransition
    ) -> list[Claimed]:
        if not queues or max_tasks <= 0:
            return []
        q = self._q
        text = q.claim_one if len(queues) == 1 else q.claim_many
        queue_param: str | list[str] = queues[0] if len(queues) == 1 else list(queues)

        async def body(conn: Conn) -> tuple[list[Claimed], list[tuple[str, Changes]]]:
            out: list[Claimed] = []
            announced: list[tuple[str, Changes]] = []
            async with conn.pipeline() as pipeline:
                async with conn.transaction():
                    now = now_millis()
                    params = (queue_param, now, max_tasks) + ((max_tasks,) if len(queues) > 1 else ())
                    cur = await conn.execute(text, params, binary=True)
                    await pipeline.sync()
                    rows = await cur.fetchall()
                    if not rows:
                        return out, announced
                    states: dict[str, tuple[InstanceState, Changes]] = {}
                    for row in rows:
                        token = _token_from(row)
                        entry = states.get(token.instance_id)
                        if entry is None:
                            entry = (InstanceState(_instance_from(row, _N_TOKEN), {}), Changes())
                            states[token.instance_id] = entry
                        state, changes = entry
                        state.tokens[token.id] = token
                        record = await self._loaded_record(
                            conn, state.instance.workflow, state.instance.version
                        )
                        out.append(transition(record.loaded, state, token, now, changes))
                    channels: list[str] = []
                    payloads: list[str] = []
                    existing = {t for state, _ in states.values() for t in state.tokens}
                    items = [(state, changes, state.instance.context) for state, changes in states.values()]
                    await self._write_many(conn, items, existing, channels, payloads)
                    announced.extend((state.instance.id, changes) for state, changes in states.values())
                    if channels:
                        await conn.execute(q.notify, (channels, payloads))
                        self.notifies_sent += 1
            return out, announced

        claimed, announced = await self._run("claim", body)
        if claimed:
            self.stats.transactions += 1
        for instance_id, changes in announced:
            self._announce(instance_id, changes)
        return claimed

    # ------------------------------------------------------------------ clock duties

    async def _drop_leadership(self) -> None:
        conn, self._leader_conn = self._leader_conn, None
        was_leader, self._leader = self._leader, False
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if was_leader:
                log.info("giving up clock-duty leadership of schema %s", self.schema)
                # Unlock explicitly: the session's end would release it too, but only once the
                # server has noticed, and the next leader should not have to wait for that.
                await conn.execute("SELECT pg_advisory_unlock(%s)", (self._clock_key,))
        with contextlib.suppress(Exception):
            await conn.close()

    async def _ensure_leader(self) -> bool:
        """Hold (or try to take) the clock-duty advisory lock on the dedicated connection."""
        async with self._leader_lock:
            if self._pool is None:
                return False
            try:
                if self._leader_conn is None:
                    self._leader_conn = await psycopg.AsyncConnection.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=10,
                        application_name=f"{self.application_name}:clock",
                        **_KEEPALIVES,
                    )
                conn = self._leader_conn
                if self._leader:
                    await conn.execute("SELECT 1")  # still our session, so still our lock
                    return True
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._clock_key,))
                row = await cur.fetchone()
                if row is not None and row[0]:
                    self._leader = True
                    log.info(
                        "this node (%s) now runs the clock duties of schema %s", self.node_id, self.schema
                    )
                return self._leader
            except psycopg.Error as exc:
                log.warning("clock-duty leadership connection failed: %s", _short(exc))
                await self._drop_leadership()
                return False

    async def clock_leader(self) -> bool:
        return await self._ensure_leader()

    async def due_tokens(self, now: int, limit: int) -> list[str]:
        rows = await self._fetch("clock duties", self._q.due, {"now": now, "n": limit})
        return list(dict.fromkeys(r[0] for r in rows))

    async def next_due_at(self) -> int | None:
        # Only the leader has clock duties; the others idle and retry the lock at the next tick.
        if not self._leader:
            return None

        ((due,),) = await self._fetch("next_due_at", self._q.next_due)
        return None if due is None else int(due)

    async def next_ready_at(self, queues: list[str]) -> int | None:
        if not queues:
            return None

        ((earliest,),) = await self._fetch("next_ready_at", self._q.next_ready, (list(queues),))
        if earliest is None:
            return None
        now = now_millis()
        # A due token that claim() skipped is locked by a transaction in flight: look again shortly.
        return earliest if earliest > now else now + 50

    async def purge_finished(self, older_than: int, limit: int) -> int:
        if limit <= 0:
            return 0

        count = len(await self._fetch("purge_finished", self._q.purge, (older_than, limit)))
        if count:
            self.stats.transactions += 1
        return count
