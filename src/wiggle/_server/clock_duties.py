"""The instance layer's clock duties: fire due timers, expire leases, apply user-task deadlines,
begin delayed starts (SCHEDULED instances, docs/flow-control.md), start due sub-workflow children, and purge finished instances past their retention.

``Instances`` (wiggle/_server/instances.py) owns one ``ClockDuties`` and delegates its
``run_clock_duties``, ``clock_loop`` and ``purge_loop`` to it; every action still goes through
``Instances.mutate`` (load -> transition -> persist, docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

from .._engine.children import ChildSpec
from .._engine.clock import expiry_kind
from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, InstanceState, InstanceStatus, TokenStatus, token_instance_id
from .._storage.base import Action, SchemaMissing
from ..errors import NotFound, Unavailable
from .subflows import ORPHAN_SWEEP_MILLIS, due_child

if TYPE_CHECKING:
    from .instances import Instances

__all__ = ["ClockDuties", "CLOCK_BATCH", "PURGE_EVERY_SECONDS", "token_missing"]

log = logging.getLogger("wiggle.server")

CLOCK_BATCH = 200  # due tokens handled per clock-duty round
CLOCK_ROUNDS = 10  # rounds per run_clock_duties call (an action may make more work due at once)
# A run of the clock duties takes no more rounds of due tokens once this long has gone by: the
# loop comes straight back (the rest is due), and the schedules, run first, get their turn.
CLOCK_RUN_SECONDS = 0.5
CLOCK_IDLE_SECONDS = 1.0  # the clock duty re-checks at least this often (other nodes' timers)
PURGE_EVERY_SECONDS = 60.0
PURGE_BATCH = 1000


def token_missing(token_id: str) -> str:
    """The NotFound message for a token that does not exist."""
    return f"token {token_id} does not exist"


class Expired(NamedTuple):
    """A step whose lease the clock expired (``log_expired``)."""

    instance_id: str
    node_id: str
    worker: str
    attempt: int
    why: str = "lease"  # how its lease ran out (wiggle/_engine/clock.py expiry_kind)


#: Steps named per worker in the log line of its expired leases; the rest are counted.
EXPIRED_NAMED = 3


#: What each kind of expiry says in the log (``log_expired``): a lease that ran out is a worker
#: that stopped answering; a heartbeat timeout, a step that stopped heartbeating; a time limit, a
#: step that ran too long on a worker that is alive (an INFO line: no worker is in trouble).
_EXPIRY_LINES = {
    "lease": (logging.WARNING, "lease expired on %d step(s) of worker %s (stopped, killed or unreachable)"),
    "heartbeat": (
        logging.WARNING,
        "%d step(s) of worker %s sent no heartbeat within their heartbeat timeout",
    ),
    "timeout": (logging.INFO, "%d step(s) of worker %s ran past their time limit (start-to-close)"),
}


def log_expired(expired: Iterable[Expired]) -> None:
    """One line per worker and kind of expiry this round, naming its steps (a few, then how many
    more): the operator's only other signs were a counter and the histories. A worker killed with
    many steps in flight makes one line, not one per step. A step past its time limit is not said
    to be a dead worker (an outside trial: every timeout raised a false "stopped, killed or
    unreachable" alarm)."""
    grouped: dict[tuple[str, str], list[Expired]] = {}
    for item in expired:
        grouped.setdefault((item.why, item.worker), []).append(item)
    for (why, worker), items in grouped.items():
        named = ", ".join(
            f"instance {e.instance_id} node {e.node_id!r} (attempt {e.attempt})"
            for e in items[:EXPIRED_NAMED]
        )
        more = f" and {len(items) - EXPIRED_NAMED} more" if len(items) > EXPIRED_NAMED else ""
        level, line = _EXPIRY_LINES[why]
        log.log(
            level,
            line + ": %s%s; each runs again as its retry policy allows",
            len(items),
            worker or "(unknown)",
            named,
            more,
        )


class ClockDuties:
    """The time-driven work of one instance layer (docs/semantics.md#clock-duties)."""

    def __init__(self, instances: Instances) -> None:
        self.instances = instances
        self._next_orphan_sweep = 0

    def clock_action(
        self,
        token_id: str,
        now: int,
        child: list[ChildSpec] | None = None,
        expired: dict[str, Expired] | None = None,
    ) -> Action[int]:
        """The one dispatch of a due token: lease expired, timer due, user-task deadline, or a
        sub-workflow's child to start or re-check (put in ``child``, for the caller to do).
        ``expired``: where an expired lease is noted (token id -> Expired), for the log."""
        engine = self.instances.engine

        def action(loaded: LoadedDefinition, state: InstanceState, _now: int) -> tuple[int, Changes | None]:
            status_now = state.instance.status
            if status_now != InstanceStatus.RUNNING and status_now != InstanceStatus.SCHEDULED:
                return 0, None
            token = state.tokens.get(token_id)
            if token is None:
                return 0, None  # finished or moved on since it was found due
            status = token.status
            if status_now == InstanceStatus.SCHEDULED:  # a delayed start's time (docs/flow-control.md)
                if status == TokenStatus.WAITING and token.available_at <= now:
                    return 1, engine.begin(loaded, state, token, now)
                return 0, None
            if status == TokenStatus.READY and 0 < token.deadline_at <= now:
                return 1, engine.start_deadline(loaded, state, token, now)  # unclaimed in time
            if status == TokenStatus.RUNNING and token.lease_expires_at <= now:
                if expired is not None:
                    expired[token_id] = Expired(
                        state.instance.id,
                        token.node_id,
                        token.lease_owner,
                        token.attempt,
                        expiry_kind(loaded.nodes[token.node_id], token, now),
                    )
                return 1, engine.expire_lease(loaded, state, token, now)
            if status == TokenStatus.WAITING and token.available_at <= now:
                return 1, engine.fire_timer(loaded, state, token, now)
            spec = due_child(loaded, state, token, now)
            if spec is not None:
                if child is not None:
                    child[:] = [spec]
                return 1, None
            if status == TokenStatus.AWAITING and 0 < token.available_at <= now:
                return 1, engine.user_task_deadline(loaded, state, token, now)
            return 0, None  # the token moved on since (a heartbeat, a completion)

        return action

    async def run(self, now: int) -> int:
        """Fire due timers, expire leases, apply user-task deadlines; the number of actions taken.

        Only the clock leader acts (``Store.clock_leader``); each action re-checks its token
        under the instance lock, so even two leaders at once could not fire a timer twice.
        """
        if not await self.instances.store.clock_leader():
            return 0
        store = self.instances.store
        gate = asyncio.Semaphore(max(1, store.clock_parallelism))
        if now >= self._next_orphan_sweep:  # docs/semantics.md#sub-workflows (cancellation)
            self._next_orphan_sweep = now + ORPHAN_SWEEP_MILLIS
            await self.instances.subflows.sweep_orphans()

        expired: dict[str, Expired] = {}

        async def one(token_id: str) -> int:
            async with gate:
                child: list[ChildSpec] = []
                acted, _ = await self.instances.mutate(
                    token_instance_id(token_id),
                    token_missing(token_id),
                    self.clock_action(token_id, now, child, expired),
                )
                if child:
                    await self.instances.subflows.start_child(child[0])
                return acted

        # Schedules first: a fan-out that makes thousands of tokens due (a for_each over
        # sub-workflows, each child started from here) held every tick back until its rounds
        # were done, and ticks were skipped on healthy servers (an outside trial: gaps of 6.8 s
        # in a 2 s schedule).
        actions = await self.instances.schedules.run_duties(now)
        budget_end = time.monotonic() + CLOCK_RUN_SECONDS
        for _ in range(CLOCK_ROUNDS):
            token_ids = await store.due_tokens(now, CLOCK_BATCH)
            if not token_ids:
                break
            results = await asyncio.gather(*(one(t) for t in token_ids), return_exceptions=True)
            acted = 0
            for result in results:
                if isinstance(result, Unavailable):
                    raise result
                if isinstance(result, BaseException):
                    if not isinstance(result, NotFound):  # purged meanwhile: nothing to do
                        log.error("clock duty failed", exc_info=result)
                    continue
                acted += result
            actions += acted
            if not acted or time.monotonic() >= budget_end:
                break
        if expired:
            log_expired(expired.values())
        actions += await self._instance_deadlines(now, gate)
        actions += await self.instances.limits.sweep(now)  # waiting for a slot (workflow_limits.py)
        return actions

    async def _instance_deadlines(self, now: int, gate: asyncio.Semaphore) -> int:
        """Fail the instances whose time limit ran out (docs/semantics.md#workflow-time-limits);
        each is re-checked under its lock, so one that finished meanwhile is left alone."""
        engine = self.instances.engine

        def action(loaded: LoadedDefinition, state: InstanceState, _now: int) -> tuple[int, Changes | None]:
            changes = engine.workflow_deadline(loaded, state, now)
            return (1, changes) if changes.finished else (0, None)

        async def one(instance_id: str) -> int:
            async with gate:
                acted, _ = await self.instances.mutate(
                    instance_id, f"instance {instance_id} not found", action
                )
                return acted

        ids = await self.instances.store.due_instances(now, CLOCK_BATCH)
        results = await asyncio.gather(*(one(i) for i in ids), return_exceptions=True)
        acted = 0
        for result in results:
            if isinstance(result, Unavailable):
                raise result
            if isinstance(result, BaseException):
                if not isinstance(result, NotFound):
                    log.error("clock duty failed", exc_info=result)
                continue
            acted += result
        return acted

    async def loop(self, stopping: asyncio.Event) -> None:
        """Run the clock duties until ``stopping`` is set, sleeping until the next due time."""
        notifier = self.instances.store.notifier
        while not stopping.is_set():
            try:
                await self.run(self.instances.clock.now())
                due = await self.instances.store.next_due_at()
                ticks = await self.instances.schedules.next_due_at()
                if ticks is not None:
                    due = ticks if due is None else min(due, ticks)
            except Exception as exc:  # the database is down: keep trying, never die
                if not isinstance(exc, SchemaMissing):  # the store says that once a minute
                    log.warning("clock duties failed: %s", exc)
                due = None
            timeout = CLOCK_IDLE_SECONDS
            if due is not None:
                timeout = min(timeout, max((due - self.instances.clock.now()) / 1000, 0.0))
            await notifier.wait_clock(timeout)

    async def purge_loop(
        self, stopping: asyncio.Event, retention_seconds: float, every_seconds: float = PURGE_EVERY_SECONDS
    ) -> None:
        """Every ``every_seconds``, delete instances finished more than ``retention_seconds`` ago."""
        while not stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), every_seconds)
            if stopping.is_set():
                return
            try:
                cutoff = self.instances.clock.now() - int(retention_seconds * 1000)
                while await self.instances.store.purge_finished(cutoff, PURGE_BATCH) == PURGE_BATCH:
                    await asyncio.sleep(0)
                await self.instances.store.schedules.purge_ticks(cutoff)
            except Exception as exc:
                log.warning("retention purge failed: %s", exc)
