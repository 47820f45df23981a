"""The in-memory store: the embedded default, no setup, one process, nothing survives a restart.

Every transition the instance layer hands over runs synchronously between two awaits, so each
mutation is atomic on the event loop: no two requests ever see or change an instance half-way, and a claim can never hand
one token to two workers.

Besides the dicts and heaps kept here, its parts with a job of their own: the bytes it holds, for
its bound (memory_bytes.py), its workflow concurrency keys (memory_conc.py), and its ready
queues with the limits a claim obeys (memory_ready.py).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from typing import Any

from .._engine.engine import Claimed, LoadedDefinition
from .._engine.state import (
    FINISHED_INSTANCE_STATUSES,
    Changes,
    HistoryEntry,
    InstanceState,
    InstanceStatus,
    Token,
    TokenStatus,
    task_id_of,
    token_instance_id,
)
from .._model import validate_name
from ..errors import NotFound, ResourceExhausted
from .base import (
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
    check_version_alias,
    instance_matches,
)
from .handoff import settle
from .memory_bytes import ByteLedger
from .memory_conc import ConcIndex
from .memory_ready import ReadyQueues
from .ops import NodeInfo, QueueStat, Readiness
from .queue_limits import QueueLimit, check_queue_limit
from .schedules import MemorySchedules

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Definitions, instances and history in dicts; READY tokens in heaps (memory_ready.py),
    timers in heaps.

    ``max_instances`` bounds the instances held at once and ``max_bytes`` the bytes of their
    contexts and history (memory_bytes.py; 0: no bound): at a bound, the instances that finished
    first are evicted before their retention ends; when that is not enough, a start is refused
    with RESOURCE_EXHAUSTED and nothing of it is kept (docs/semantics.md#bounded-memory).
    """

    def __init__(self, max_instances: int = 0, max_bytes: int = 0) -> None:
        super().__init__()
        if max_instances < 0:
            raise ValueError(f"max_instances must be 0 (no bound) or more, got {max_instances}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 (no bound) or more, got {max_bytes}")
        self.max_instances = max_instances
        self.max_bytes = max_bytes
        self.ledger = ByteLedger()  # the bytes held, kept at every write
        self.evicted = 0  # finished instances dropped early to stay under the bound
        # the finished instances' ids, in the order they finished (eviction takes the oldest); an
        # instance leaves it when it is forgotten (evicted or purged: a purged one stayed in it, and
        # it grew by one id per instance for the server's life)
        self._finished: dict[str, None] = {}
        self._definitions: dict[tuple[str, str], WorkflowRecord] = {}
        self._latest: dict[str, str] = {}
        self._aliases: dict[str, dict[int, str]] = {}  # workflow -> alias -> version
        self._instances: dict[str, InstanceState] = {}
        self._ids: list[str] = []  # every instance id, ascending (ids are time-sortable: appended in order)
        self._history: dict[str, list[HistoryEntry]] = {}
        self._timers: list[tuple[int, int, str]] = []  # heap of (due, seq, token): sleeps, deadlines, leases
        self._deadlines: list[tuple[int, str]] = []  # heap of (deadline_at, instance): time limits
        self._deadline_of: dict[str, int] = {}  # the deadline each RUNNING instance has in the heap
        self._seq = itertools.count()
        # the READY tokens per queue in claim order, and the limits a claim obeys: concurrency
        # keys, per-key rates, queue limits (memory_ready.py); they share the store's ``_seq``
        self.ready = ReadyQueues(self._instances, self.limited_queues, self._seq)
        self.schedules = MemorySchedules(self.insert)
        # idempotent starts: request id -> instance id, and back (purged with the instance)
        self._requests: dict[str, str] = {}
        self._request_of: dict[str, list[str]] = {}
        self._deduplicated_requests: set[str] = set()  # request ids answered with another's instance
        # deduplication (docs/flow-control.md#deduplication): (workflow, key) -> the holder's id
        self._dedup: dict[tuple[str, str], str] = {}
        # workflow-level concurrency keys: their live and waiting instances (memory_conc.py)
        self.conc = ConcIndex()

    # ------------------------------------------------------------------ plumbing

    def _loaded(self, state: InstanceState) -> LoadedDefinition:
        return self._definitions[(state.instance.workflow, state.instance.version)].loaded

    @property
    def bytes_used(self) -> int:
        """Bytes of contexts and history held now (what ``max_bytes`` bounds)."""
        return self.ledger.used

    def _apply(self, state: InstanceState, changes: Changes, counted: bool = False) -> None:
        """Index what a transition changed and wake whoever waits for it (the "commit");
        ``counted``: a start whose bytes ``insert`` counted already."""
        self.stats.transactions += 1
        if not counted:
            self.ledger.written(state, changes)
        ready: dict[str, int] | None = None  # queue -> tokens that became READY: wake that many pollers
        now = 0
        ready_queues = self.ready
        for token in changes.tokens.values():
            ready_queues.track(token)  # its limit key's and its queue's RUNNING counts (memory_ready.py)
            status = token.status
            if status == TokenStatus.READY:
                if not now:
                    now = self.clock.now()
                ready_queues.push(token, now)  # where a claim looks for it
                if ready is None:
                    ready = {token.queue: 1}
                else:
                    ready[token.queue] = ready.get(token.queue, 0) + 1
                if token.deadline_at:  # a schedule-to-start limit: the clock duty fails it unclaimed
                    heapq.heappush(self._timers, (token.deadline_at, next(self._seq), token.id))
            elif status == TokenStatus.RUNNING:
                heapq.heappush(self._timers, (token.lease_expires_at, next(self._seq), token.id))
            elif status == TokenStatus.WAITING or (status == TokenStatus.AWAITING and token.available_at > 0):
                heapq.heappush(self._timers, (token.available_at, next(self._seq), token.id))
        inst = state.instance
        if inst.conc_key:  # a limited workflow's live and waiting instances (memory_conc.py)
            self.conc.track(inst)
        # one heap entry per deadline, not per transition (a retry's new one leaves the old stale)
        if inst.deadline_at and inst.status == InstanceStatus.RUNNING:
            if self._deadline_of.get(inst.id) != inst.deadline_at:
                self._deadline_of[inst.id] = inst.deadline_at
                heapq.heappush(self._deadlines, (inst.deadline_at, inst.id))
        elif changes.finished:
            self._deadline_of.pop(inst.id, None)
        if changes.history:
            self._history.setdefault(state.instance.id, []).extend(changes.history)
        if changes.handoffs:
            settle(changes.handoffs)  # steps leased to waiting pollers (wiggle/_storage/handoff.py)
        if changes.ready_queues:
            # a queue named without a READY token to count (never expected) wakes all its pollers
            self.notifier.work_ready(changes.ready_queues, ready or {})
        if changes.timers:
            self.notifier.clock_changed()
        if changes.finished:
            if self.max_instances or self.max_bytes:
                finished = self._finished
                finished.pop(state.instance.id, None)  # finished again after a retry: now the newest
                finished[state.instance.id] = None
            self.notifier.instance_finished(state.instance.id)

    async def set_queue_limit(self, limit: QueueLimit) -> None:
        check_queue_limit(limit)
        self.ready.set_limit(limit)
        self.notifier.work_ready([limit.queue], {})  # pollers look again under the new limits

    async def queue_limits(self) -> list[QueueLimit]:
        return [self.limited_queues[q] for q in sorted(self.limited_queues)]

    async def rate_tats(self, keys: list[str]) -> dict[str, float]:
        return self.ready.rate_tats(keys)

    # ------------------------------------------------------------------ definitions

    async def put_definition(self, loaded: LoadedDefinition) -> tuple[WorkflowRecord, bool]:
        name = loaded.definition.name
        key = (name, loaded.version)
        existing = self._definitions.get(key)
        if existing is not None:
            return existing, False
        record = WorkflowRecord(loaded, self.clock.now())
        self._definitions[key] = record
        self._latest[name] = loaded.version
        return record, True

    async def get_workflow(self, name: str, version: str = "") -> WorkflowRecord:
        validate_name(name, "workflow")
        if not version:
            latest = self._latest.get(name)
            if latest is None:
                raise NotFound(f"workflow {name!r} is not registered")
            version = latest
        record = self._definitions.get((name, version))
        if record is None:
            if name not in self._latest:
                raise NotFound(f"workflow {name!r} is not registered")
            raise NotFound(f"workflow {name!r} has no version {version!r}")
        return record

    async def list_workflows(self, name: str = "") -> list[WorkflowRecord]:
        records = [r for (n, _), r in self._definitions.items() if not name or n == name]
        return sorted(records, key=lambda r: (r.loaded.definition.name, r.registered_at))

    async def put_version_alias(self, workflow: str, alias: int, version: str) -> None:
        check_version_alias(workflow, alias, version)
        await self.get_workflow(workflow, version)  # NotFound naming what is missing
        self._aliases.setdefault(workflow, {})[alias] = version

    async def version_aliases(self, workflow: str) -> dict[int, str]:
        validate_name(workflow, "workflow")
        return dict(sorted(self._aliases.get(workflow, {}).items()))

    # ------------------------------------------------------------------ instances

    def _make_room(self, size: int) -> None:
        """Evict finished instances (the earliest finished first) until one more of ``size``
        bytes fits under both bounds, else refuse (ResourceExhausted) and keep nothing of it."""
        count_bound, byte_bound = self.max_instances, self.max_bytes
        if byte_bound and size > byte_bound:
            raise ResourceExhausted(
                f"this start holds {size} bytes of context and history, more than the in-memory "
                f"store's whole bound of {byte_bound} bytes (--max-memory-bytes / WIGGLE_MAX_MEMORY_BYTES); "
                "raise the bound, make the context smaller, or use PostgreSQL"
            )
        used = self.ledger.used
        over_count = bool(count_bound) and len(self._instances) >= count_bound
        over_bytes = bool(byte_bound) and used + size > byte_bound
        if not (over_count or over_bytes):
            return
        # evict a slice at once (1% of the bound) so that the id index is rebuilt once per slice,
        # not once per start
        want = max(1, count_bound // 100) if over_count else 0
        target = byte_bound - byte_bound // 100 - size if over_bytes else used
        freed = 0
        doomed: dict[str, None] = {}
        finished = self._finished
        while finished and (len(doomed) < want or used - freed > target):
            instance_id = next(iter(finished))
            del finished[instance_id]
            state = self._instances.get(instance_id)
            if (
                state is not None
                and instance_id not in doomed
                and state.instance.status in FINISHED_INSTANCE_STATUSES
            ):
                doomed[instance_id] = None
                freed += self.ledger.of(instance_id)
        self._forget(list(doomed))
        self.evicted += len(doomed)
        if over_count and not doomed:
            raise ResourceExhausted(
                f"the in-memory store holds {len(self._instances)} running instances, its bound "
                "(--max-live-instances / WIGGLE_MAX_LIVE_INSTANCES); let some finish, raise the bound, "
                "or use PostgreSQL"
            )
        if byte_bound and self.ledger.used + size > byte_bound:
            self._refuse_bytes(size)

    def _refuse_bytes(self, size: int) -> None:
        raise ResourceExhausted(
            f"the in-memory store holds {self.ledger.used} bytes of contexts and history and a start "
            f"of {size} bytes would pass its bound of {self.max_bytes} bytes (--max-memory-bytes / "
            "WIGGLE_MAX_MEMORY_BYTES), with no finished instance left to evict; let some finish, "
            "raise the bound, or use PostgreSQL"
        )

    def _forget(self, doomed: list[str]) -> None:
        """Drop instances (evicted or purged) with their history, request ids and bytes."""
        if not doomed:
            return
        for instance_id in doomed:
            self._forget_one(instance_id)
            self.ledger.drop(instance_id)
        gone = set(doomed)
        self._ids = [i for i in self._ids if i not in gone]

    def _forget_one(self, instance_id: str) -> None:
        """Drop an instance, its history, the request ids that name it and the key it holds."""
        state = self._instances.pop(instance_id)
        self._history.pop(instance_id, None)
        self._finished.pop(instance_id, None)
        for request_id in self._request_of.pop(instance_id, ()):
            del self._requests[request_id]
            self._deduplicated_requests.discard(request_id)
        inst = state.instance
        key = (inst.workflow, inst.dedup_key)
        if inst.dedup_key and self._dedup.get(key) == instance_id:
            del self._dedup[key]

    def _dedup_holder(self, workflow: str, key: str, now: int) -> str | None:
        """The instance holding ``key`` for ``workflow``: live, or finished less than its window ago."""
        holder = self._dedup.get((workflow, key))
        state = None if holder is None else self._instances.get(holder)
        if state is None:
            return None
        inst = state.instance
        if inst.status in FINISHED_INSTANCE_STATUSES and inst.finished_at + inst.dedup_window <= now:
            return None
        return holder

    async def insert(self, state: InstanceState, changes: Changes) -> None:
        footprint = self.ledger.measure(state, changes)
        self._make_room(footprint.total)  # may refuse: then nothing of this start is kept
        instance_id = state.instance.id
        self._instances[instance_id] = state
        self.ledger.add(instance_id, footprint)
        ids = self._ids
        if not ids or ids[-1] < instance_id:
            ids.append(instance_id)
        else:  # pragma: no cover - ids are generated in increasing order
            bisect.insort(ids, instance_id)
        self._apply(state, changes, counted=True)

    async def insert_many(self, items: list[NewInstance]) -> list[str]:
        out: list[str] = []
        requests = self._requests
        now = self.clock.now()
        for item in items:
            inst = item.state.instance
            rid = item.request_id
            if rid:
                known = requests.get(rid)
                if known is not None:
                    out.append(known)
                    item.deduplicated = rid in self._deduplicated_requests
                    continue
            answer = inst.id
            holder = self._dedup_holder(inst.workflow, inst.dedup_key, now) if inst.dedup_key else None
            if holder is not None:
                answer = holder
                item.deduplicated = True
            else:
                await self.insert(item.state, item.changes)  # may refuse (the bound): nothing recorded
                if inst.dedup_key:
                    self._dedup[(inst.workflow, inst.dedup_key)] = inst.id
            if rid:
                requests[rid] = answer
                self._request_of.setdefault(answer, []).append(rid)
                if item.deduplicated:
                    self._deduplicated_requests.add(rid)
            out.append(answer)
        return out

    async def mutate(self, instance_id: str, missing: str, action: Action[R]) -> tuple[R, InstanceState]:
        state = self._instances.get(instance_id)
        if state is None:
            raise NotFound(missing)
        result, changes = action(self._loaded(state), state, self.clock.now())
        if changes is not None:
            self._apply(state, changes)
        return result, state

    async def admit(
        self, workflow: str, key: str, action: AdmitAction
    ) -> list[tuple[InstanceState, Changes]]:
        changed = self.conc.admit(workflow, key, self._instances, self._loaded, action, self.clock.now())
        for state, changes in changed:
            self._apply(state, changes)
        return changed

    async def waiting_keys(self, limit: int) -> list[tuple[str, str]]:
        return self.conc.waiting_keys(self._instances, limit)

    async def concurrency_waiting(self) -> dict[str, int]:
        return self.conc.waiting_per_workflow(self._instances)

    def _get(self, instance_id: str) -> InstanceState:
        state = self._instances.get(instance_id)
        if state is None:
            raise NotFound(f"instance {instance_id} does not exist")
        return state

    async def get_instance(self, instance_id: str) -> InstanceView:
        return self.view(self._get(instance_id))

    async def list_instances(self, query: InstanceQuery) -> tuple[list[InstanceView], str]:
        out: list[InstanceView] = []
        size = max(query.page_size, 1)
        ids = self._ids
        instances = self._instances
        # Ids are time-sortable: newest first, and the page token is the last id returned, so a
        # page starts right below it (found by bisection, not by walking the newer ids).
        end = bisect.bisect_left(ids, query.page_token) if query.page_token else len(ids)
        for i in range(end - 1, -1, -1):
            state = instances[ids[i]]
            inst = state.instance
            if query.created_after and inst.created_at < query.created_after:
                continue
            if query.created_before and inst.created_at >= query.created_before:
                continue
            if not instance_matches(query, inst, state.tokens.values()):
                continue
            out.append(self.view(state) if query.with_context else self.view_without_context(state))
            if len(out) > size:
                break
        if len(out) > size:
            out = out[:size]
            return out, out[-1].instance.id
        return out, ""

    async def history(self, instance_id: str) -> list[HistoryEntry]:
        self._get(instance_id)
        return list(self._history.get(instance_id, ()))

    # ------------------------------------------------------------------ workers

    async def claim(
        self,
        worker_id: str,
        queues: list[str],
        max_tasks: int,
        transition: ClaimTransition,
        skip: Skip = NOTHING_SKIPPED,
    ) -> list[Claimed]:
        now = self.clock.now()
        out: list[Claimed] = []
        ready = self.ready
        for queue in queues:
            ready.promote(queue, now)
        instances = self._instances
        passes_over = None
        passed: list[Any] = []
        if skip:

            def passes_over(token: Token) -> bool:
                instance = instances[token_instance_id(token.id)].instance
                return (instance.workflow, instance.version, token.node_id) in skip

        try:
            while len(out) < max_tasks:
                # the best step of the queues (memory_ready.py)
                taken = ready.take(queues, now, passes_over, passed)
                if taken is None:
                    break
                queue, token = taken
                state = instances[token_instance_id(token.id)]
                changes = Changes()
                claimed = transition(self._loaded(state), state, token, now, changes)
                if self.limited_queues:
                    ready.claimed_on(queue, token, now)
                self._apply(state, changes)
                out.append(claimed)
        finally:
            if passed:
                ready.restore(passed)
        return out

    # ------------------------------------------------------------------ clock duties

    async def due_tokens(self, now: int, limit: int) -> list[str]:
        # Entries go stale when a token moves on (a heartbeat, a completion): the instance layer
        # re-checks each token under its "lock" (wiggle/_server/instances.py, clock duties).
        due: dict[str, None] = {}
        timers = self._timers
        while timers and timers[0][0] <= now and len(due) < limit:
            token_id = heapq.heappop(timers)[2]
            state = self._instances.get(token_instance_id(token_id))
            if state is not None and state.instance.status not in FINISHED_INSTANCE_STATUSES:
                due[token_id] = None
        return list(due)

    async def due_instances(self, now: int, limit: int) -> list[str]:
        due: dict[str, None] = {}
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now and len(due) < limit:
            _, instance_id = heapq.heappop(deadlines)
            state = self._instances.get(instance_id)
            # an entry goes stale when the instance finishes or a retry moves its deadline on
            if state is not None and state.instance.status == InstanceStatus.RUNNING:
                if 0 < state.instance.deadline_at <= now:
                    due[instance_id] = None
        return list(due)

    async def leases_of(self, owner_prefix: str, limit: int) -> list[tuple[str, str, int]]:
        found: list[tuple[str, str, int]] = []
        for state in self._instances.values():
            if state.instance.status in FINISHED_INSTANCE_STATUSES:
                continue
            for token in state.tokens.values():
                if token.status == TokenStatus.RUNNING and token.lease_owner.startswith(owner_prefix):
                    found.append((task_id_of(token), token.lease_owner, token.started_at))
                    if len(found) >= limit:
                        return found
        return found

    async def next_due_at(self) -> int | None:
        candidates = [heap[0][0] for heap in (self._timers, self._deadlines) if heap]
        return min(candidates) if candidates else None

    async def next_ready_at(self, queues: list[str]) -> int | None:
        return self.ready.next_ready_at(queues, self.clock.now())

    async def orphaned_children(self, limit: int) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for state in self._instances.values():
            inst = state.instance
            if inst.parent_id and inst.status == InstanceStatus.RUNNING:
                parent = self._instances.get(inst.parent_id)
                if parent is None or parent.instance.status != InstanceStatus.RUNNING:
                    found.append((inst.id, inst.parent_id))
                    if len(found) >= limit:
                        break
        return found

    async def purge_finished(self, older_than: int, limit: int) -> int:
        doomed = [
            i
            for i, s in self._instances.items()
            if s.instance.status in FINISHED_INSTANCE_STATUSES and s.instance.finished_at < older_than
        ][:limit]
        self._forget(doomed)
        self.ready.purge_rates(self.clock.now)  # the rate states whose moment has passed
        return len(doomed)

    # ------------------------------------------------------------------ operating (issue #13)

    async def count_by_status(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for state in self._instances.values():
            inst = state.instance
            per = counts.setdefault(inst.workflow, {})
            per[str(inst.status)] = per.get(str(inst.status), 0) + 1
        return counts

    async def queue_stats(self, now: int) -> list[QueueStat]:
        return self.ready.stats(now)

    async def clock_leader(self) -> bool:
        return True  # one process: it always runs the clock duties

    async def readiness(self) -> Readiness:
        return Readiness(ready=True, detail="ready")  # in memory: nothing to reach, no schema

    async def cluster_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(node_id="memory", this_node=True, clock_leader=True, last_seen=self.clock.now())]
