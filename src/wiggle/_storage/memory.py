"""The in-memory store: the embedded default, no setup, one process, nothing survives a restart.

Every transition the instance layer hands over runs synchronously between two awaits, so each
mutation is atomic on the event loop: no two requests ever see or change an instance half-way, and a claim can never hand
one token to two workers.
"""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools

from .._engine.engine import Claimed, LoadedDefinition
from .._engine.start_options import claim_rank
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
    Action,
    AdmitAction,
    ClaimTransition,
    InstanceQuery,
    InstanceView,
    NewInstance,
    R,
    Store,
    WorkflowRecord,
    check_version_alias,
    instance_matches,
)
from .handoff import settle
from .memory_bytes import ByteLedger
from .memory_conc import ConcIndex
from .ops import NodeInfo, QueueStat, Readiness
from .queue_limits import (
    QueueLimit,
    admit,
    check_queue_limit,
    describe,
    next_admit_at,
    rate_admit,
    rate_next_at,
)
from .schedules import MemorySchedules

__all__ = ["MemoryStore"]

#: Per-key rate states kept before the purge drops those whose moment has passed (a key without
#: one may go at once: dropping them changes nothing).
RATE_KEYS_KEPT = 1024


class MemoryStore(Store):
    """Definitions, instances and history in dicts; READY tokens and timers in heaps.

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
        self._finished: collections.deque[str] = collections.deque()  # ids, in the order they finished
        self._definitions: dict[tuple[str, str], WorkflowRecord] = {}
        self._latest: dict[str, str] = {}
        self._aliases: dict[str, dict[int, str]] = {}  # workflow -> alias -> version
        self._instances: dict[str, InstanceState] = {}
        self._ids: list[str] = []  # every instance id, ascending (ids are time-sortable: appended in order)
        self._history: dict[str, list[HistoryEntry]] = {}
        # queue -> heap of (available_at, seq, token, priority): READY tokens not yet due (a
        # backoff, a delayed start), moved to ``_due`` when they are (``_promote``)
        self._ready: dict[str, list[tuple[int, int, str, int]]] = {}
        # queue -> heap of (claim rank, seq, token, available_at): the READY tokens due without a
        # concurrency limit, claimed in rank order (priority with aging,
        # wiggle/_engine/start_options.py); a token due when it becomes READY (the common case)
        # goes straight here (``_place``), a limited one to ``_keyed``
        self._due: dict[str, list[tuple[int, int, str, int]]] = {}
        self._timers: list[tuple[int, int, str]] = []  # heap of (due, seq, token): sleeps, deadlines, leases
        self._deadlines: list[tuple[int, str]] = []  # heap of (deadline_at, instance): time limits
        self._deadline_of: dict[str, int] = {}  # the deadline each RUNNING instance has in the heap
        self._seq = itertools.count()
        self.schedules = MemorySchedules(self.insert)
        # idempotent starts: request id -> instance id, and back (purged with the instance)
        self._requests: dict[str, str] = {}
        self._request_of: dict[str, list[str]] = {}
        self._deduplicated_requests: set[str] = set()  # request ids answered with another's instance
        # deduplication (docs/flow-control.md#deduplication): (workflow, key) -> the holder's id
        self._dedup: dict[tuple[str, str], str] = {}
        # concurrency limits (wiggle/_engine/limits.py): RUNNING tokens per limit key, the key
        # each such token holds; per queue and key the due READY tokens of the key (claim-rank
        # heaps like ``_due``), and per queue the index of its keys with room, a heap of
        # (RUNNING of the key, its best rank, seq, key) checked when it reaches the top
        # (``_keyed_head``; the fair order of docs/flow-control.md#fair-claims-across-keys); a
        # full key leaves the index and comes back when one of its attempts ends
        self._held: dict[str, int] = {}
        self._holding: dict[str, str] = {}
        self._keyed: dict[str, dict[str, list[tuple[int, int, str, int]]]] = {}
        self._key_index: dict[str, list[tuple[int, int, int, str]]] = {}
        self._key_entry: dict[tuple[str, str], tuple[int, int, int, str]] = {}  # the live index item
        self._key_queues: dict[str, set[str]] = {}  # limit key -> the queues with a heap of it
        # per-key rate limits (docs/flow-control.md#per-key-rate-limits): each key's rate state
        # (``tat``, queue_limits.rate_admit), the due READY tokens a claim found over their key's
        # rate per (key, queue), and per queue the moments those keys may go again: a heap of
        # (at, seq, key), its live item per (key, queue) in ``_rate_wake_at``
        self._rate_tat: dict[str, float] = {}
        self._rate_parked: dict[tuple[str, str], list[tuple[int, int, str, int]]] = {}
        self._rate_wakes: dict[str, list[tuple[int, int, str]]] = {}
        self._rate_wake_at: dict[tuple[str, str], int] = {}
        # queue limits (wiggle/_storage/queue_limits.py): each limited queue's limits, its rate's
        # state, and its RUNNING tokens a claim marked queue_held (token id -> queue)
        self._tat: dict[str, float] = {}
        self._queue_running: dict[str, int] = {}
        self._queue_holding: dict[str, str] = {}
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
        for token in changes.tokens.values():
            if token.limit_key or self._holding:
                self._track_limit(token)
            if token.queue_held or self._queue_holding:
                self._track_queue(token)
            status = token.status
            if status == TokenStatus.READY:
                available_at = token.available_at
                if not now:
                    now = self.clock.now()
                if available_at <= now:
                    entry = (
                        claim_rank(available_at, token.priority),
                        next(self._seq),
                        token.id,
                        available_at,
                    )
                    if token.limit_key:
                        self._place(token.queue, entry, token)
                    else:
                        heapq.heappush(self._due.setdefault(token.queue, []), entry)
                else:
                    heapq.heappush(
                        self._ready.setdefault(token.queue, []),
                        (available_at, next(self._seq), token.id, token.priority),
                    )
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
                self._finished.append(state.instance.id)
            self.notifier.instance_finished(state.instance.id)

    def _track_limit(self, token: Token) -> None:
        """Count ``token`` against its limit key while it is RUNNING there; when it stops, free
        the slot and move the key's parked READY tokens that now fit back to their queue."""
        held = self._holding.get(token.id, "")
        now_key = token.limit_key if token.status == TokenStatus.RUNNING else ""
        if held == now_key:
            return
        if now_key:
            self._holding[token.id] = now_key
            self._held[now_key] = self._held.get(now_key, 0) + 1
        else:
            del self._holding[token.id]
        if held:
            left = self._held[held] - 1
            if left:
                self._held[held] = left
            else:
                del self._held[held]
            for queue in self._key_queues.get(held, ()):
                self._index_key(queue, held)  # fewer running: earlier in the fair order, or back in it

    def _track_queue(self, token: Token) -> None:
        """Count ``token`` against its queue's max_running while it is RUNNING with queue_held."""
        held = self._queue_holding.get(token.id, "")
        now_queue = token.queue if token.queue_held and token.status == TokenStatus.RUNNING else ""
        if held == now_queue:
            return
        if now_queue:
            self._queue_holding[token.id] = now_queue
            self._queue_running[now_queue] = self._queue_running.get(now_queue, 0) + 1
        else:
            del self._queue_holding[token.id]
        if held:
            self._queue_running[held] -= 1

    def _queue_open(self, queue: str, now: int) -> bool:
        """True if ``queue``'s limits let a claim take one more of its steps at ``now``."""
        limit = self.limited_queues.get(queue)
        if limit is None:
            return True
        if limit.max_running and self._queue_running.get(queue, 0) >= limit.max_running:
            return False
        return admit(limit, self._tat.get(queue, 0.0), now) is not None

    def _claimed_on(self, queue: str, token: Token, now: int) -> None:
        """A claim took ``token`` on ``queue`` (before its changes are applied): mark it for the
        queue's max_running, count it against the rate."""
        limit = self.limited_queues.get(queue)
        token.queue_held = limit is not None and limit.max_running > 0
        if limit is not None and limit.rate_max:
            tat = admit(limit, self._tat.get(queue, 0.0), now)
            assert tat is not None  # _queue_open said so, in this same step of the event loop
            self._tat[queue] = tat

    async def set_queue_limit(self, limit: QueueLimit) -> None:
        check_queue_limit(limit)
        if limit.limited:
            known = self.limited_queues.get(limit.queue)
            if known is None or (known.rate_max, known.rate_period_millis) != (
                limit.rate_max,
                limit.rate_period_millis,
            ):
                self._tat.pop(limit.queue, None)  # a new rate starts with a full bucket
            self.limited_queues[limit.queue] = limit
        else:
            self.limited_queues.pop(limit.queue, None)
            self._tat.pop(limit.queue, None)
        self.notifier.work_ready([limit.queue], {})  # pollers look again under the new limits

    async def queue_limits(self) -> list[QueueLimit]:
        return [self.limited_queues[q] for q in sorted(self.limited_queues)]

    async def rate_tats(self, keys: list[str]) -> dict[str, float]:
        return {key: self._rate_tat[key] for key in keys if key in self._rate_tat}

    def _over_limit(self, token: Token) -> bool:
        """True if ``token``'s limit key has its most attempts RUNNING already."""
        return self._held.get(token.limit_key, 0) >= token.limit_max

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
        while self._finished and (len(doomed) < want or used - freed > target):
            instance_id = self._finished.popleft()
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
            out.append(self.view(state))
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
        self, worker_id: str, queues: list[str], max_tasks: int, transition: ClaimTransition
    ) -> list[Claimed]:
        now = self.clock.now()
        out: list[Claimed] = []
        for queue in queues:
            self._promote(queue, now)
        while len(out) < max_tasks:
            best: tuple[tuple[int, int, int], bool] | None = None  # ((running of its key, rank, seq), keyed)
            best_queue = ""
            for queue in queues:
                if self.limited_queues and queue in self.limited_queues and not self._queue_open(queue, now):
                    continue
                head = self._head(queue, now)
                if head is not None and (best is None or head[0] < best[0]):
                    best, best_queue = head, queue
            if best is None:
                break
            token = self._take(best_queue, best[1], now)
            state = self._instances[token_instance_id(token.id)]
            changes = Changes()
            claimed = transition(self._loaded(state), state, token, now, changes)
            if self.limited_queues:
                self._claimed_on(best_queue, token, now)
            self._apply(state, changes)
            out.append(claimed)
        return out

    def _head(self, queue: str, now: int) -> tuple[tuple[int, int, int], bool] | None:
        """The order (running of its key, rank, seq) of the step a claim on ``queue`` would take
        next (docs/flow-control.md#fair-claims-across-keys), and whether it is under a
        concurrency limit; None: nothing claimable now. Steps found over their key's rate are set
        aside on the way (``_rate_park``)."""
        self._wake_rates(queue, now)
        free = self._due_head(queue, now)
        keyed = self._keyed_head(queue, now)
        if keyed is not None:
            load, entry = keyed
            if free is None or (load, entry[0], entry[1]) < (0, free[0], free[1]):
                return (load, entry[0], entry[1]), True
        return None if free is None else ((0, free[0], free[1]), False)

    def _take(self, queue: str, keyed: bool, now: int) -> Token:
        """Pop the step ``_head`` chose on ``queue`` and count it against its key's rate. Nothing
        of ``queue`` changed since: ``_head`` of another queue changes only that queue's heaps,
        so the chosen step is still the top of ``_due``, or of the heap of the key at the top of
        the queue's index (``_keyed_head`` left that item valid)."""
        if keyed:
            heap = self._keyed[queue][self._key_index[queue][0][3]]
        else:
            heap = self._due[queue]
        token_id = heapq.heappop(heap)[2]
        token = self._instances[token_instance_id(token_id)].tokens[token_id]
        if token.rate_key:
            tat = self._rate_tat.get(token.rate_key, 0.0)
            after = rate_admit(token.rate_max, token.rate_period_millis, tat, now)
            assert after is not None  # _head found it admitted, in this same step of the event loop
            self._rate_tat[token.rate_key] = after
        return token

    def _due_head(self, queue: str, now: int) -> tuple[int, int, str, int] | None:
        """The best entry of ``queue``'s steps without a concurrency limit (stale ones dropped)."""
        heap = self._due.get(queue)
        while heap:
            entry = heap[0]
            token = self._live_ready(entry[3], entry[2], queue)
            if token is None:
                heapq.heappop(heap)
            elif token.rate_key and self._over_rate(token, now):
                self._rate_park(queue, heapq.heappop(heap), token, now)
            else:
                return entry
        return None

    def _keyed_head(self, queue: str, now: int) -> tuple[int, tuple[int, int, str, int]] | None:
        """(running of its key, entry) of the best step of ``queue`` under a concurrency limit whose
        key has room; index items that no longer say the truth are dropped or put right."""
        index = self._key_index.get(queue)
        while index:
            item = index[0]
            load, rank, _, key = item
            if self._key_entry.get((queue, key)) is not item:
                heapq.heappop(index)  # superseded
                continue
            heap = self._keyed[queue][key]
            token = self._keyed_token(queue, key, heap, now)
            held = self._held.get(key, 0)
            if token is None or held >= token.limit_max:
                heapq.heappop(index)  # empty, or full: an ending attempt (or a new step) indexes it again
                del self._key_entry[(queue, key)]
                if not heap:
                    self._drop_key(queue, key)
                continue
            if (held, heap[0][0]) != (load, rank):
                heapq.heappop(index)
                self._index_key(queue, key)
                continue
            return held, heap[0]
        return None

    def _keyed_token(
        self, queue: str, key: str, heap: list[tuple[int, int, str, int]], now: int
    ) -> Token | None:
        """The live token at the top of ``key``'s heap on ``queue``, stale entries dropped and
        steps over their rate set aside."""
        while heap:
            entry = heap[0]
            token = self._live_ready(entry[3], entry[2], queue)
            if token is None or token.limit_key != key:
                heapq.heappop(heap)
            elif token.rate_key and self._over_rate(token, now):
                self._rate_park(queue, heapq.heappop(heap), token, now)
            else:
                return token
        return None

    def _drop_key(self, queue: str, key: str) -> None:
        del self._keyed[queue][key]
        queues = self._key_queues[key]
        queues.discard(queue)
        if not queues:
            del self._key_queues[key]

    def _place(self, queue: str, entry: tuple[int, int, str, int], token: Token) -> None:
        """Put a due READY token's entry where a claim looks for it: ``_due``, or its key's heap."""
        key = token.limit_key
        if not key:
            heapq.heappush(self._due.setdefault(queue, []), entry)
            return
        heaps = self._keyed.setdefault(queue, {})
        heap = heaps.get(key)
        if heap is None:
            heap = heaps[key] = []
            self._key_queues.setdefault(key, set()).add(queue)
        heapq.heappush(heap, entry)
        if heap[0] is entry:
            self._index_key(queue, key)  # a new best step for its key

    def _index_key(self, queue: str, key: str) -> None:
        """(Re)enter ``key`` in ``queue``'s index as it stands now (an older item is superseded)."""
        heap = self._keyed.get(queue, {}).get(key)
        if not heap:
            return
        item = (self._held.get(key, 0), heap[0][0], next(self._seq), key)
        self._key_entry[(queue, key)] = item
        heapq.heappush(self._key_index.setdefault(queue, []), item)

    def _over_rate(self, token: Token, now: int) -> bool:
        """True if ``token``'s rate key admits no claim at ``now``."""
        tat = self._rate_tat.get(token.rate_key, 0.0)
        return rate_admit(token.rate_max, token.rate_period_millis, tat, now) is None

    def _rate_park(self, queue: str, entry: tuple[int, int, str, int], token: Token, now: int) -> None:
        """Set aside a due step over its key's rate until the key's next moment."""
        key = token.rate_key
        heapq.heappush(self._rate_parked.setdefault((key, queue), []), entry)
        tat = self._rate_tat.get(key, 0.0)
        self._rate_wake(key, queue, rate_next_at(token.rate_max, token.rate_period_millis, tat, now))

    def _rate_wake(self, key: str, queue: str, at: int) -> None:
        """Look at ``key``'s set-aside steps on ``queue`` again at ``at`` (or earlier, if due sooner)."""
        current = self._rate_wake_at.get((key, queue))
        if current is not None and current <= at:
            return
        self._rate_wake_at[(key, queue)] = at
        heapq.heappush(self._rate_wakes.setdefault(queue, []), (at, next(self._seq), key))

    def _wake_rates(self, queue: str, now: int) -> None:
        """Move back the set-aside steps of ``queue`` whose key's rate admits them now: as many as
        the rate admits at ``now`` (one, unless the rate is finer than a millisecond), the next
        wake at the moment after them; a backlog of a key costs a move per claim, not per step."""
        wakes = self._rate_wakes.get(queue)
        while wakes and wakes[0][0] <= now:
            at, _, key = heapq.heappop(wakes)
            if self._rate_wake_at.get((key, queue)) != at:
                continue
            del self._rate_wake_at[(key, queue)]
            parked = self._rate_parked[(key, queue)]
            tat = self._rate_tat.get(key, 0.0)
            while parked:
                entry = heapq.heappop(parked)
                token = self._live_ready(entry[3], entry[2], queue)
                if token is None or token.rate_key != key:
                    continue
                self._place(queue, entry, token)
                tat = rate_admit(token.rate_max, token.rate_period_millis, tat, now) or tat
                if parked and rate_admit(token.rate_max, token.rate_period_millis, tat, now) is None:
                    later = rate_next_at(token.rate_max, token.rate_period_millis, tat, now)
                    self._rate_wake(key, queue, max(later, now + 1))
                    break
            if not parked:
                del self._rate_parked[(key, queue)]

    def _promote(self, queue: str, now: int) -> None:
        """Move the READY tokens of ``queue`` that are due to where a claim looks for them."""
        heap = self._ready.get(queue)
        if not heap:
            return
        while heap and heap[0][0] <= now:
            available_at, seq, token_id, priority = heapq.heappop(heap)
            token = self._live_ready(available_at, token_id, queue)
            if token is not None:  # a stale entry is dropped
                self._place(queue, (claim_rank(available_at, priority), seq, token_id, available_at), token)

    def _live_ready(self, available_at: int, token_id: str, queue: str) -> Token | None:
        state = self._instances.get(token_instance_id(token_id))
        if state is None or state.instance.status in FINISHED_INSTANCE_STATUSES:
            return None
        token = state.tokens.get(token_id)
        if (
            token is None
            or token.status != TokenStatus.READY
            or token.available_at != available_at
            or token.queue != queue
        ):
            return None
        return token

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
        best: int | None = None
        now = self.clock.now()
        for queue in queues:
            earliest = self._next_ready_on(queue, now)
            if earliest is None:
                continue
            limit = self.limited_queues.get(queue)
            if limit is not None:
                if limit.max_running and self._queue_running.get(queue, 0) >= limit.max_running:
                    continue  # full: the end of one of its steps wakes the queue
                earliest = max(earliest, next_admit_at(limit, self._tat.get(queue, 0.0), earliest))
            if best is None or earliest < best:
                best = earliest
        return best

    def _next_ready_on(self, queue: str, now: int) -> int | None:
        """The earliest moment a claim could take a READY token of ``queue`` (None: none, or only
        steps waiting for a slot of their key, which an ending attempt wakes): now if one is
        claimable, else the first of a delayed step's time and a rate-waiting key's next moment."""
        self._promote(queue, now)
        if self._head(queue, now) is not None:
            return now
        best: int | None = None
        heap = self._ready.get(queue)
        while heap and self._live_ready(heap[0][0], heap[0][2], queue) is None:
            heapq.heappop(heap)
        if heap:
            best = heap[0][0]
        wakes = self._rate_wakes.get(queue)
        while wakes and self._rate_wake_at.get((wakes[0][2], queue)) != wakes[0][0]:
            heapq.heappop(wakes)
        if wakes and (best is None or wakes[0][0] < best):
            best = wakes[0][0]
        return best

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
        if len(self._rate_tat) > RATE_KEYS_KEPT:  # a key whose moment has passed says nothing
            now = self.clock.now()
            self._rate_tat = {key: tat for key, tat in self._rate_tat.items() if tat > now}
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
        stats: dict[str, QueueStat] = {}
        for state in self._instances.values():
            for token in state.tokens.values():
                if token.status == TokenStatus.READY:
                    stat = stats.setdefault(token.queue, QueueStat(queue=token.queue))
                    if token.available_at > now:
                        stat.delayed += 1
                        continue
                    stat.ready += 1
                    if token.limit_key and self._over_limit(token):
                        stat.limit_waiting += 1
                    if token.rate_key and self._over_rate(token, now):
                        tat = self._rate_tat.get(token.rate_key, 0.0)
                        at = rate_next_at(token.rate_max, token.rate_period_millis, tat, now)
                        stat.rate_waiting += 1
                        stat.rate_waiting_until = min(stat.rate_waiting_until or at, at)
                    if not stat.oldest_ready_at or token.available_at < stat.oldest_ready_at:
                        stat.oldest_ready_at = token.available_at
                elif token.status == TokenStatus.RUNNING:
                    stat = stats.setdefault(token.queue, QueueStat(queue=token.queue))
                    stat.running += 1
                    if token.limit_key:
                        stat.limit_held += 1
                    if token.local_run_owner:
                        stat.in_local_run += 1
                    owner = token.lease_owner or token.local_run_owner
                    stat.in_flight = {**stat.in_flight, owner: stat.in_flight.get(owner, 0) + 1}
        limits = [(limit, self._tat.get(q, 0.0)) for q, limit in self.limited_queues.items()]
        return describe(stats, limits, now)

    async def clock_leader(self) -> bool:
        return True  # one process: it always runs the clock duties

    async def readiness(self) -> Readiness:
        return Readiness(ready=True, detail="ready")  # in memory: nothing to reach, no schema

    async def cluster_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(node_id="memory", this_node=True, clock_leader=True, last_seen=self.clock.now())]
