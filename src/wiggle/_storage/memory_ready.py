"""The memory store's ready queues: its READY steps per queue in the order a claim takes them,
with the limits a claim obeys.

Per queue, the READY tokens not yet due (a backoff, a delayed start) in a heap of their moments,
and the due ones in heaps of claim rank (priority with aging, docs/flow-control.md#priorities);
the due steps under a concurrency limit in a heap per key, with an index of the keys that have
room, claimed in the fair order of docs/flow-control.md#fair-claims-across-keys. Next to them
what a claim checks: each limit key's RUNNING attempts (docs/flow-control.md#concurrency-limits),
each key's rate state and the steps set aside over it (docs/flow-control.md#per-key-rate-limits),
each limited queue's RUNNING steps and rate (docs/flow-control.md#queue-limits). MemoryStore
(wiggle/_storage/memory.py) indexes every token a commit changed here (``track``, ``push``) and
claims through ``take``; an entry goes stale when its token moves on, and a read drops it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from .._engine.start_options import claim_rank
from .._engine.state import FINISHED_INSTANCE_STATUSES, InstanceState, Token, TokenStatus, token_instance_id
from .ops import QueueStat
from .queue_limits import QueueLimit, admit, describe, next_admit_at, rate_admit, rate_next_at

__all__ = ["ReadyQueues", "RATE_KEYS_KEPT"]

#: Per-key rate states kept before the purge drops those whose moment has passed (a key without
#: one may go at once: dropping them changes nothing).
RATE_KEYS_KEPT = 1024


class ReadyQueues:
    """The READY steps of a memory store's queues, and the limits their claims obey.

    It reads the store's ``instances`` (to tell a live heap entry from a stale one) and
    ``limits`` (Store.limited_queues), dicts the store keeps and never replaces, and draws its
    heaps' tie-breaking sequence numbers from the store's ``seq``.
    """

    def __init__(
        self, instances: dict[str, InstanceState], limits: dict[str, QueueLimit], seq: Iterator[int]
    ) -> None:
        self._instances = instances
        self._limits = limits
        self._seq = seq
        # queue -> heap of (available_at, seq, token, priority): READY tokens not yet due (a
        # backoff, a delayed start), moved to ``_due`` when they are (``promote``)
        self._ready: dict[str, list[tuple[int, int, str, int]]] = {}
        # queue -> heap of (claim rank, seq, token, available_at): the READY tokens due without a
        # concurrency limit, claimed in rank order (priority with aging,
        # wiggle/_engine/start_options.py); a token due when it becomes READY (the common case)
        # goes straight here (``_place``), a limited one to ``_keyed``
        self._due: dict[str, list[tuple[int, int, str, int]]] = {}
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

    # ------------------------------------------------------------------ commits

    def track(self, token: Token) -> None:
        """Count ``token``, as a commit left it, against its limit key and its queue's
        max_running while it is RUNNING there (MemoryStore._apply, for each token it changed)."""
        if token.limit_key or self._holding:
            self._track_limit(token)
        if token.queue_held or self._queue_holding:
            self._track_queue(token)

    def push(self, token: Token, now: int) -> None:
        """Index a token a commit made READY: where a claim looks for it if it is due at ``now``,
        else among the steps not yet due."""
        available_at = token.available_at
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

    # ------------------------------------------------------------------ limits

    def queue_open(self, queue: str, now: int) -> bool:
        """True if ``queue``'s limits let a claim take one more of its steps at ``now``."""
        limit = self._limits.get(queue)
        if limit is None:
            return True
        if limit.max_running and self._queue_running.get(queue, 0) >= limit.max_running:
            return False
        return admit(limit, self._tat.get(queue, 0.0), now) is not None

    def claimed_on(self, queue: str, token: Token, now: int) -> None:
        """A claim took ``token`` on ``queue`` (before its changes are applied): mark it for the
        queue's max_running, count it against the rate."""
        limit = self._limits.get(queue)
        token.queue_held = limit is not None and limit.max_running > 0
        if limit is not None and limit.rate_max:
            tat = admit(limit, self._tat.get(queue, 0.0), now)
            assert tat is not None  # queue_open said so, in this same step of the event loop
            self._tat[queue] = tat

    def set_limit(self, limit: QueueLimit) -> None:
        """Keep a checked ``limit`` (Store.set_queue_limit), or drop the queue's if it sets none."""
        if limit.limited:
            known = self._limits.get(limit.queue)
            if known is None or (known.rate_max, known.rate_period_millis) != (
                limit.rate_max,
                limit.rate_period_millis,
            ):
                self._tat.pop(limit.queue, None)  # a new rate starts with a full bucket
            self._limits[limit.queue] = limit
        else:
            self._limits.pop(limit.queue, None)
            self._tat.pop(limit.queue, None)

    def rate_tats(self, keys: list[str]) -> dict[str, float]:
        """The rate states kept of ``keys`` (Store.rate_tats)."""
        return {key: self._rate_tat[key] for key in keys if key in self._rate_tat}

    def purge_rates(self, clock: Callable[[], int]) -> None:
        """Drop the rate states whose moment has passed, once more than RATE_KEYS_KEPT are kept
        (MemoryStore.purge_finished; ``clock`` is read only then)."""
        if len(self._rate_tat) > RATE_KEYS_KEPT:  # a key whose moment has passed says nothing
            now = clock()
            self._rate_tat = {key: tat for key, tat in self._rate_tat.items() if tat > now}

    def _over_limit(self, token: Token) -> bool:
        """True if ``token``'s limit key has its most attempts RUNNING already."""
        return self._held.get(token.limit_key, 0) >= token.limit_max

    def _over_rate(self, token: Token, now: int) -> bool:
        """True if ``token``'s rate key admits no claim at ``now``."""
        tat = self._rate_tat.get(token.rate_key, 0.0)
        return rate_admit(token.rate_max, token.rate_period_millis, tat, now) is None

    # ------------------------------------------------------------------ claims

    def take(
        self,
        queues: list[str],
        now: int,
        passes_over: Callable[[Token], bool] | None = None,
        passed: list[tuple[str, tuple[int, int, str, int], Token]] | None = None,
    ) -> tuple[str, Token] | None:
        """The step a claim on ``queues`` takes next at ``now``, with its queue: the best head
        of the queues whose limits let one more go, popped and counted against its key's rate
        (MemoryStore.claim, after ``promote``); None: nothing claimable now.

        ``passes_over``: steps the claim does not take (their worker gave their node back,
        wiggle/_server/unrunnable.py), popped into ``passed`` uncounted; the claim puts them back
        with ``restore`` when it is done, where they were."""
        while True:
            best: tuple[tuple[int, int, int], bool] | None = None  # ((running of its key, rank, seq), keyed)
            best_queue = ""
            for queue in queues:
                if self._limits and queue in self._limits and not self.queue_open(queue, now):
                    continue
                head = self._head(queue, now)
                if head is not None and (best is None or head[0] < best[0]):
                    best, best_queue = head, queue
            if best is None:
                return None
            if passes_over is None or passed is None:
                return best_queue, self._take(best_queue, best[1], now)
            entry, token = self._pop(best_queue, best[1])
            if not passes_over(token):
                self._count_rate(token, now)
                return best_queue, token
            passed.append((best_queue, entry, token))

    def restore(self, passed: list[tuple[str, tuple[int, int, str, int], Token]]) -> None:
        """Put back the steps a claim passed over (``take``), in their places."""
        for queue, entry, token in passed:
            self._place(queue, entry, token)

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
        token = self._pop(queue, keyed)[1]
        self._count_rate(token, now)
        return token

    def _pop(self, queue: str, keyed: bool) -> tuple[tuple[int, int, str, int], Token]:
        """Pop the step ``_head`` chose on ``queue`` (``_take``): its entry and token."""
        if keyed:
            heap = self._keyed[queue][self._key_index[queue][0][3]]
        else:
            heap = self._due[queue]
        entry = heapq.heappop(heap)
        return entry, self._instances[token_instance_id(entry[2])].tokens[entry[2]]

    def _count_rate(self, token: Token, now: int) -> None:
        """Count a step taken at ``now`` against its key's rate."""
        if token.rate_key:
            tat = self._rate_tat.get(token.rate_key, 0.0)
            after = rate_admit(token.rate_max, token.rate_period_millis, tat, now)
            assert after is not None  # _head found it admitted, in this same step of the event loop
            self._rate_tat[token.rate_key] = after

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

    def promote(self, queue: str, now: int) -> None:
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

    # ------------------------------------------------------------------ pollers and operators

    def next_ready_at(self, queues: list[str], now: int) -> int | None:
        """The earliest moment a claim on ``queues`` could take a step (Store.next_ready_at)."""
        best: int | None = None
        for queue in queues:
            earliest = self._next_ready_on(queue, now)
            if earliest is None:
                continue
            limit = self._limits.get(queue)
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
        self.promote(queue, now)
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

    def stats(self, now: int) -> list[QueueStat]:
        """What each queue holds at ``now``, with its limits (Store.queue_stats)."""
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
        limits = [(limit, self._tat.get(q, 0.0)) for q, limit in self._limits.items()]
        return describe(stats, limits, now)
