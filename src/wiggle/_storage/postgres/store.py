"""The PostgreSQL store: production storage, and what lets several servers form a cluster.

Every mutation is one transaction under the instance row lock (``SELECT ... FOR UPDATE``): load
the instance and its active tokens, run the transition the instance layer hands over
(wiggle/_server/instances.py), write what it changed, commit, then wake whoever waits. Concurrent
mutations share transactions (group_commit.py). Statements of a transaction are pipelined: a
mutation costs two round trips (lock + load, then writes + COMMIT). Claims take due READY tokens
with ``FOR UPDATE SKIP LOCKED`` on the token *and* its instance row, so a claim never waits for
(nor deadlocks with) a mutation in progress and never hands one token to two workers.

Several servers on one schema form a cluster (cluster.py: LISTEN/NOTIFY wake-ups, peers, clock
leadership). Connections and retries are in db.py; no raw psycopg error leaves this package.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from ..._clock import WallClock
from ..._engine.engine import Claimed, LoadedDefinition
from ..._engine.state import Changes, HistoryEntry, InstanceState
from ...errors import NotFound
from ..base import (
    NOTHING_SKIPPED,
    Action,
    AdmitAction,
    ClaimTransition,
    InstanceQuery,
    InstanceView,
    NewInstance,
    R,
    Skip,
    Store,
    WorkflowRecord,
    not_yet_due,
    ready_counts,
)
from ..handoff import settle
from ..ops import NodeInfo, QueueStat, Readiness
from ..queue_limits import QueueLimit, describe
from . import ops
from .claims import ClaimAttempt, ClaimTransaction, KeyRoomTaken
from .cluster import Cluster
from .codecs import history_from, views
from .context_indexes import ensure_context_indexes
from .db import CommitUnknown, Conn, Database, transaction, vacuum_problem
from .definitions import Definitions
from .group_commit import GroupCommit, Items
from .limits import KEY_ROOM_TAKEN
from .migrations import check_schema, lock_key, migrate
from .queue_limit_state import QueueLimitState
from .rate_blocks import Reservation, block_size
from .schedules import PostgresSchedules
from .start_commit import StartCommit, StartQueries
from .statements import Queries, list_conditions
from .statistics import Statistics
from .workflow_limits import ConcQueries, admission
from .writes import ChangeWriter

__all__ = ["PostgresStore"]

log = logging.getLogger("wiggle.postgres")

#: How soon a poll looks again for a due step that its claim passed over, not for a rate: a row
#: locked by a transaction in flight (``next_ready_at``), in ms.
LOCKED_LOOK_AGAIN_MILLIS = 50
#: For how long after a rate's moment a due step that the rate held back is looked for again at
#: once (``next_ready_at``), in ms: past it, a claim passed the step over for a lock.
RATE_JUST_DUE_MILLIS = 50


class PostgresStore(Store):
    """Definitions, instances, tokens and history in PostgreSQL (``schema``, default "wiggle").

    ``pool_size`` bounds the connections of this process's pool; the store also keeps one
    LISTEN connection and, on demand, one clock-leadership connection. ``acquire_timeout`` is
    how long a call waits for a pooled connection and ``max_attempts`` how often a transient
    failure is tried before the call fails with Unavailable. ``stall_timeout``: seconds after
    which PostgreSQL ends a session of this node left idle inside a transaction (its row locks
    would hold up the other nodes' claims and reports) or, for the clock leader, left silent (the
    clock duties then go to another node: cluster.py).
    """

    def __init__(
        self,
        url: str,
        schema: str = "wiggle",
        pool_size: int = 10,
        *,
        acquire_timeout: float = 5.0,
        max_attempts: int = 3,
        start_linger: float = 0.002,
        context_search_fields: tuple[str, ...] = (),
        group_commits: int = 1,
        stall_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.url = url
        self.context_search_fields = context_search_fields  # indexed at open (context_indexes.py)
        self.schema = check_schema(schema)
        self.queries = Queries(schema)
        # the class (first int) of the per-key advisory locks of concurrency limits (_admit)
        self._limit_lock_class = lock_key("limits", self.schema) & 0x7FFFFFFF
        # the class of the per-key advisory locks of workflow-level limits (workflow_limits.py)
        self._conc_lock_class = lock_key("workflow-limits", self.schema) & 0x7FFFFFFF
        self.conc_queries = ConcQueries(self.schema)
        self.cluster = Cluster(schema, self.notifier, self.queries, stall_timeout)
        self.notifier.spill = self.cluster.post_work  # a wake-up left unused goes to the others
        self.db = Database(
            url, self.cluster.application_name, pool_size, acquire_timeout, max_attempts, stall_timeout
        )
        self.db.schema = self.schema  # named when the schema is not there (SchemaMissing)
        # Clock actions in flight at once. Each is a mutation that queues on the group commit (its
        # own connections) and, for a sub-workflow's child, a read and a start: the gate bounds
        # coroutines, not connections, and a wider one lets more of them share a commit. At half
        # the pool a for_each over sub-workflows started 70-95 children a second, at twice the
        # pool 270 (an outside trial; bench/README.md, round thirty-nine).
        self.clock_parallelism = max(1, self.db.pool_size * 2)
        self.definitions = Definitions(self.db, self.queries)
        # this node's copy of the queue limits (``limited_queues``) and its fast rates' blocks
        self.limits = QueueLimitState(self.db, self.queries, self.limited_queues)
        self.rate_blocks = self.limits.rate_blocks
        # claims admitted on their read's counts that a key's lock then refused (limits.py): run again
        self.key_room_retries = 0
        self.writer = ChangeWriter(self.queries)
        self.group = GroupCommit(
            self.db,
            self.queries,
            self.definitions.loaded_record,
            self._persist,
            self.writer.write_checked,
            self._committed,
            group_commits,
        )
        self.schedules = PostgresSchedules(self.db, self.schema, self._persist, self._announce)
        self.starts = StartCommit(
            self.db,
            StartQueries(self.schema),
            self._persist_new,
            self._persist_new_checked,
            self._started,
            self.definitions.forget_latest,
            # how long a start committer waits for more starts when callers overlap
            # (committers.py, "Linger under contention"); seconds, 0 = never
            start_linger,
        )
        self.group.now = self._now
        self.starts.now = self._now
        # a claim's transaction (claims.py), on this store's definitions, writes, limits and clocks
        self.claims = ClaimTransaction(
            self.queries,
            self.definitions.loaded_record,
            self._persist,
            self.limited_queues,
            self._limit_lock_class,
            self._now,
            self._rate_now,
        )
        self.statistics = Statistics(self.db, self.schema)  # ANALYZE as the tables grow (statistics.py)

    @property
    def node_id(self) -> str:
        """This node's id (in its connections' names and its NOTIFY payloads)."""
        return self.cluster.node_id

    @property
    def application_name(self) -> str:
        """The application_name of this node's pooled connections (its other ones add a role)."""
        return self.cluster.application_name

    def waiting_for(self, kind: str, subjects: Sequence[str]) -> contextlib.AbstractContextManager[None]:
        return self.cluster.wakeups.waiting(kind, subjects)

    @property
    def is_clock_leader(self) -> bool:
        """True while this store holds the clock-duty advisory lock."""
        return self.cluster.leader

    def _now(self) -> int:
        # Read at each call: the instance layer may hand the store its clock after construction.
        return self.clock.now()

    def _rate_now(self) -> int | None:
        """The clock of per-key rates for the statements: None (the database's, one clock for
        every server) on the wall clock; the store's when a test kit moves it (virtual time)."""
        return None if isinstance(self.clock, WallClock) else self.clock.now()

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        if self.db.pool is not None:
            return
        await self.db.retry_connect("migrating", lambda: migrate(self.db.url, self.schema))
        await self.db.open(f"wiggle-{self.node_id}")
        try:
            await self._check_vacuum()
            await self.statistics.open()
            await self.cluster.open(self.db)
            await ensure_context_indexes(self.db, self.schema, self.context_search_fields)
        except BaseException:
            await self.close()
            raise

    async def _check_vacuum(self) -> None:
        """Say at start when the database server reclaims no dead rows (db.py ``vacuum_problem``):
        an operator who never runs ``wiggle doctor`` had no sign of it (an outside soak)."""
        rows = await self.db.fetch(
            "checking autovacuum", "SELECT current_setting('autovacuum'), current_setting('track_counts')"
        )
        problem = vacuum_problem(*rows[0])
        if problem is not None:
            log.warning("%s (docs/postgresql.md#retention)", problem)

    async def close(self) -> None:
        await self.group.close()
        await self.starts.close()
        await self.statistics.close()
        await self.cluster.close()
        await self.db.close()

    # ------------------------------------------------------------------ persisting

    async def _persist(
        self,
        conn: Conn,
        items: Items,
        existing: set[str] | frozenset[str],
        check: tuple[str, list[Any]] | None = None,
    ) -> bool:
        """Write ``items`` inside the caller's transaction (their NOTIFYs follow the commit:
        ``_announce``); ``check``: a SELECT run first in the same statement (writes.py)."""
        return await self.writer.write(conn, items, existing, check)

    def _announce(self, instance_id: str, changes: Changes, view: InstanceView | None = None) -> None:
        """Wake this node's waiters for what a commit changed and the other nodes' (NOTIFYs sent
        after the commit, cluster.py ``Cluster.post``), and hand this node's pollers the steps
        leased to them in it (wiggle/_storage/handoff.py). ``view``: the instance as the commit
        left it, when it finished it (group_commit.py ``finished_view``): this node's waiters for
        the finish take it instead of reading the instance again."""
        work: list[str] = []
        if changes.ready_queues:
            work = self.notifier.work_ready(changes.ready_queues, ready_counts(changes))
            if self.cluster.peers:  # (alone, nobody is told anything: Cluster.post)
                work += [q for q in not_yet_due(changes, self._now()) if q not in work]
        self.cluster.post(instance_id, changes, work)
        if changes.handoffs:
            settle(changes.handoffs)
        if changes.timers:
            self.notifier.clock_changed()
        if changes.finished:
            self.notifier.instance_finished(instance_id, view)
        if changes.created:
            self.statistics.grew(1)  # committed: an analysis started now counts it

    def _committed(
        self, wrote: bool, announce: list[tuple[str, Changes]], finished: dict[str, InstanceView]
    ) -> None:
        if wrote:
            self.stats.transactions += 1
        for instance_id, changes in announce:
            self._announce(instance_id, changes, finished.get(instance_id))

    async def mutate(self, instance_id: str, missing: str, action: Action[R]) -> tuple[R, InstanceState]:
        if not instance_id:
            raise NotFound(missing)
        return await self.group.submit(instance_id, missing, action)

    async def admit(
        self, workflow: str, key: str, action: AdmitAction
    ) -> list[tuple[InstanceState, Changes]]:
        args = (workflow, key, action, self._now)
        load, persist = self.definitions.loaded_record, self._persist

        async def body(conn: Conn) -> list[tuple[InstanceState, Changes]]:
            return await admission(
                conn, self.queries, self.conc_queries, self._conc_lock_class, args, load, persist
            )

        changed = await self.db.run("admit", body)
        if changed:
            if self.group.cache is not None:  # written outside the group commit (state_cache.py)
                self.group.cache.forget(state.instance.id for state, _ in changed)
            self._committed(True, [(state.instance.id, changes) for state, changes in changed], {})
        return changed

    async def waiting_keys(self, limit: int) -> list[tuple[str, str]]:
        rows = await self.db.fetch("waiting_keys", self.conc_queries.waiting_keys, (limit,))
        return [(r[0], r[1]) for r in rows]

    async def concurrency_waiting(self) -> dict[str, int]:
        rows = await self.db.fetch("concurrency_waiting", self.conc_queries.waiting_per_workflow)
        return {r[0]: int(r[1]) for r in rows}

    # ------------------------------------------------------------------ definitions

    async def put_definition(self, loaded: LoadedDefinition) -> tuple[WorkflowRecord, bool]:
        record, created = await self.definitions.put(loaded, self.clock.now())
        if created:
            self.stats.transactions += 1
        return record, created

    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        return await self.definitions.get(name, version)

    async def workflow_for_start(self, name: str, version: str) -> tuple[WorkflowRecord, bool]:
        # The latest version as this node last saw it, without a read: the start's transaction
        # confirms it (expect_latest, migration 0009) — one statement inside a transaction that
        # runs anyway, instead of a read of its own before it.
        if not version:
            hinted = self.definitions.hint(name)
            if hinted is not None:
                return hinted, True
        return await self.definitions.get(name, version), False

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        return await self.definitions.versions(name)

    async def put_version_alias(self, workflow: str, alias: int, version: str) -> None:
        await self.definitions.put_alias(workflow, alias, version)
        self.stats.transactions += 1

    async def version_aliases(self, workflow: str) -> dict[int, str]:
        return await self.definitions.aliases(workflow)

    # ------------------------------------------------------------------ instances

    async def insert(self, state: InstanceState, changes: Changes) -> None:
        attempts = 0

        async def body(conn: Conn) -> bool:
            nonlocal attempts
            attempts += 1
            try:
                async with transaction(conn):
                    await self._persist(conn, [(state, changes, None)], frozenset())
            except pg_errors.UniqueViolation:
                if attempts > 1:
                    return False  # an earlier attempt did commit (its acknowledgement was lost)
                raise
            return True

        if await self.db.run("start", body):
            self.stats.transactions += 1
            self._announce(state.instance.id, changes)

    async def insert_many(self, items: list[NewInstance]) -> list[str]:
        return await self.starts.submit(items)

    @staticmethod
    def _new_items(items: list[NewInstance]) -> Items:
        return [(item.state, item.changes, None) for item in items]

    async def _persist_new(self, conn: Conn, items: list[NewInstance]) -> None:
        await self._persist(conn, self._new_items(items), frozenset())

    async def _persist_new_checked(
        self, conn: Conn, items: list[NewInstance], check: tuple[str, list[Any]]
    ) -> Any:
        row, _ = await self.writer.write_one(
            conn, self._new_items(items), frozenset(), check, "a start's commit"
        )
        return row

    def _started(self, created: list[NewInstance], written: list[NewInstance], xid: str) -> None:
        if created:
            self.stats.transactions += 1
        cache = self.group.cache
        if cache is not None and xid:
            # as the start wrote them: an instance whose first step was handed to a waiting poll
            # (or that waits for a timer) is kept, and its first report needs no read
            for item in written:
                cache.keep(item.state, item.changes, {}, xid)
        for item in created:
            self._announce(item.state.instance.id, item.changes)

    async def get_instance(self, instance_id: str) -> InstanceView:
        found = views(await self.db.fetch("get_instance", self.queries.view, (instance_id,), binary=True))
        if not found:
            raise NotFound(f"instance {instance_id} does not exist")
        return found[0]

    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        size = max(query.page_size, 1)
        conds, params = list_conditions(query, self.schema)
        statement = self.queries.list_instances if query.with_context else self.queries.list_instances_bare
        text = statement.replace("{where}", " AND ".join(conds) or "TRUE")
        params.append(size + 1)
        found = views(await self.db.fetch("list_instances", text, params, binary=True))
        if len(found) > size:
            found = found[:size]
            return found, found[-1].instance.id
        return found, ""

    async def orphaned_children(self, limit: int) -> list[tuple[str, str]]:
        rows = await self.db.fetch("orphans", self.queries.orphans, (limit,))
        return [(r[0], r[1]) for r in rows]

    async def history(self, instance_id: str) -> list[HistoryEntry]:
        rows = await self.db.fetch("history", self.queries.history, (instance_id,))
        if not rows and not await self.db.fetch("history", self.queries.instance_exists, (instance_id,)):
            raise NotFound(f"instance {instance_id} does not exist")
        return history_from(rows)

    async def claim(
        self,
        worker_id: str,
        queues: list[str],
        max_tasks: int,
        transition: ClaimTransition,
        skip: Skip = NOTHING_SKIPPED,
    ) -> list[Claimed]:
        if not queues or max_tasks <= 0:
            return []
        await self.limits.refresh()
        known = self.limited_queues
        fast = [known[queue] for queue in queues if queue in known and block_size(known[queue])]
        reserved: dict[str, Reservation] = {}  # moments of the fast rates for this claim
        if fast:  # taken ahead of the claim, in blocks (rate_blocks.py)
            spent = await self.rate_blocks.reserve(fast, max_tasks, self.clock.now)
            reserved = {queue: moments for queue, moments in spent.items() if moments.count}
        unused: dict[str, int] = {}  # what the claim did not use of them, given back after it
        attempt = ClaimAttempt()  # what the last run was about to commit
        run = functools.partial(
            self.claims.run,
            queues=queues,
            max_tasks=max_tasks,
            transition=transition,
            reserved=reserved,
            unused=unused,
            skip=skip,
            attempt=attempt,
        )

        async def body(conn: Conn, one_trip: bool) -> tuple[list[Claimed], list[tuple[str, Changes]]]:
            # A run whose COMMIT's answer was lost left its result in ``attempt``: if it
            # committed, its steps are leased to the worker, who gets them now. Running the claim
            # again instead took other steps, and those were delivered to nobody: they waited out
            # their lease and lost an attempt ("lease expired", an outside trial).
            if attempt.result is not None:
                found = await attempt.settle(conn, self.queries.xact_status)
                if found is not None:
                    return found
            try:
                return await run(conn, one_trip=one_trip)
            except CommitUnknown:
                raise  # (``attempt`` is kept: the next run asks what became of it)
            except BaseException:
                attempt.clear()  # rolled back
                raise

        async def in_one_trip(conn: Conn) -> tuple[list[Claimed], list[tuple[str, Changes]]]:
            try:
                return await body(conn, one_trip=True)
            except psycopg.Error as exc:
                if exc.sqlstate != KEY_ROOM_TAKEN:
                    raise
                raise KeyRoomTaken() from exc

        try:
            claimed, announced = await self.db.run("claim", in_one_trip)
        except KeyRoomTaken:  # another claim of a key committed since the read: count under the locks
            self.key_room_retries += 1
            claimed, announced = await self.db.run("claim", functools.partial(body, one_trip=False))
        for queue, n in unused.items():
            if n:
                self.rate_blocks.give_back(reserved[queue], n)
        if claimed:
            self.stats.transactions += 1
            if self.group.cache is not None:  # their tokens' xmins changed (state_cache.py)
                self.group.cache.forget(c.instance.id for c in claimed)
            keyed = sum(1 for c in claimed if c.token.limit_key)
            if keyed:  # the key counts' plans need statistics that saw keyed steps run (statistics.py)
                self.statistics.claimed_keyed(keyed)
        for instance_id, changes in announced:
            self._announce(instance_id, changes)
        return claimed

    def hand_off_admits(self, queue: str, now: int, spend: bool = False) -> bool:
        return self.limits.hand_off_admits(queue, now, spend)

    async def set_queue_limit(self, limit: QueueLimit) -> None:
        await self.limits.put(limit)
        self.stats.transactions += 1
        self.notifier.work_ready([limit.queue], {})  # this node's pollers look again

    async def queue_limits(self) -> list[QueueLimit]:
        return [limit for limit, _ in await self.limits.rows()]

    async def rate_tats(self, keys: list[str]) -> dict[str, float]:
        return await self.limits.rate_tats(keys)

    # ------------------------------------------------------------------ clock duties

    async def clock_leader(self) -> bool:
        return await self.cluster.ensure_leader()

    async def due_tokens(self, now: int, limit: int) -> list[str]:
        rows = await self.db.fetch("clock duties", self.queries.due, {"now": now, "n": limit})
        return list(dict.fromkeys(r[0] for r in rows))

    async def due_instances(self, now: int, limit: int) -> list[str]:
        rows = await self.db.fetch("clock duties", self.queries.due_instances, (now, limit))
        return [r[0] for r in rows]

    async def next_due_at(self) -> int | None:
        # Only the leader has clock duties; the others idle and retry the lock at the next tick.
        if not self.cluster.leader:
            return None

        ((due,),) = await self.db.fetch("next_due_at", self.queries.next_due)
        return None if due is None else int(due)

    async def next_ready_at(self, queues: list[str]) -> int | None:
        if not queues:
            return None

        rate_now = self._rate_now()
        params = (rate_now, list(queues), list(queues))
        rows = await self.db.fetch("next_ready_at", self.queries.next_ready, params)
        now = self.clock.now()
        moments = [(queue, int(at), None if since is None else float(since)) for queue, at, since in rows]
        limited = await self.limits.among(queues)
        if limited:
            moments = await self.limits.next_under_limits(moments, limited, now)
        earliest = min((at for _, at, _ in moments), default=None)
        if earliest is None:
            return None
        if earliest > now:
            return earliest
        # Due now. A step that a rate (its queue's, its key's) held back is due at the rate's
        # moment, which may have come since the claim that passed it over: looked for again at
        # once. Any other due step a claim passed over is locked by a transaction in flight:
        # looked for again shortly. (The rate's steps waited the 50 ms too, so a rate of more
        # claims a second than 1000 / (claim + 50 ms) admitted a fraction of it: 17 a second
        # under 150, 6.7 under a step's rate of 150, found by an outside flow-control trial.)
        if any(at <= now and since is not None and since < RATE_JUST_DUE_MILLIS for _, at, since in moments):
            return now
        return now + LOCKED_LOOK_AGAIN_MILLIS

    async def purge_finished(self, older_than: int, limit: int) -> int:
        if limit <= 0:
            return 0

        async def forget_rates(conn: Conn) -> None:
            await conn.execute(self.queries.purge_rate_keys, (self._rate_now(),))

        await self.db.run("purge_rate_keys", forget_rates)  # per-key rates' moments long past
        count = len(await self.db.fetch("purge_finished", self.queries.purge, (older_than, limit)))
        if count:
            self.stats.transactions += 1
        return count

    # ------------------------------------------------------------------ operating (issue #13)

    async def count_by_status(self) -> dict[str, dict[str, int]]:
        return await ops.count_by_status(self.db, self.schema)

    async def leases_of(self, owner_prefix: str, limit: int) -> list[tuple[str, str, int]]:
        return await ops.leases_of(self.db, self.schema, owner_prefix, limit)

    async def queue_stats(self, now: int) -> list[QueueStat]:
        stats = {
            stat.queue: stat for stat in await ops.queue_stats(self.db, self.schema, now, self._rate_now())
        }
        return describe(stats, await self.limits.rows(), now)

    async def readiness(self) -> Readiness:
        if self.db.pool is None:
            return Readiness(ready=False, detail="not connected to the database yet")
        return await ops.readiness(self.db, self.schema)

    async def cluster_nodes(self) -> list[NodeInfo]:
        return await ops.cluster_nodes(self.db, self.schema, self.cluster.app_prefix, self.cluster.node_id)
