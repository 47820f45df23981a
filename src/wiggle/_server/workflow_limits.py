"""Workflow-level concurrency limits over the store (docs/flow-control.md#workflow-concurrency).

The engine holds an instance of a limited workflow SCHEDULED, waiting for a slot, whenever it
would become live (its start, a delayed start's time, a retry: wiggle/_engine/workflow_limits.py);
an *admission* of its key (``Store.admit``, under the key's lock) then begins the oldest waiting
ones that fit, or cancels, as the limit's strategy says. This module runs admissions:

- right after each commit that may change a key's live set or its queue (``after``: an instance
  held, or finished; the instance layer calls it after ``Store.mutate``, after starts of every
  kind: clients', schedules', sub-workflow children);
- and from the clock duties now and then (``sweep``, every SWEEP_MILLIS and at a server's first
  round): an admission lost to a crash between a commit and its follow-up is made good, and
  waiting instances begin after a restart.

Each admission is idempotent (it decides from the rows as they are under the lock), so running
one twice, or on two servers at once, is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._engine import workflow_limits as rules
from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, InstanceState, InstanceStatus
from .._engine.tokens import fail_instance
from .._model import Limit
from ..errors import Unavailable, WiggleError

if TYPE_CHECKING:
    from .instances import Instances

__all__ = ["WorkflowLimits", "SWEEP_MILLIS", "needs_admission"]

log = logging.getLogger("wiggle.server")

#: How often (workflow time, ms) the clock leader admits every key with waiting instances.
SWEEP_MILLIS = 5_000
SWEEP_BATCH = 200  # keys per sweep


def needs_admission(state: InstanceState, changes: Changes) -> bool:
    """Whether committed ``changes`` may let a waiting instance of the key begin (a live one
    finished) or made one wait (held)."""
    inst = state.instance
    if not inst.conc_key or not changes.instance_changed:
        return False
    return changes.finished or (inst.status == InstanceStatus.SCHEDULED and inst.conc_since > 0)


class WorkflowLimits:
    """The admissions of one instance layer."""

    def __init__(self, instances: Instances) -> None:
        self.instances = instances
        self._next_sweep = 0

    async def after(self, states: Iterable[InstanceState]) -> None:
        """Admit the keys of ``states`` (committed); a failure is logged (the sweep retries it)."""
        keys = sorted({(s.instance.workflow, s.instance.conc_key) for s in states if s.instance.conc_key})
        for workflow, key in keys:
            try:
                await self.admit(workflow, key)
            except Unavailable as exc:
                log.warning("admission of %s %s deferred to the clock duties: %s", workflow, key, exc)

    async def sweep(self, now: int) -> int:
        """Every SWEEP_MILLIS: admit every key with waiting instances; the instances changed."""
        if now < self._next_sweep:
            return 0
        self._next_sweep = now + SWEEP_MILLIS
        changed = 0
        for workflow, key in await self.instances.store.waiting_keys(SWEEP_BATCH):
            changed += await self.admit(workflow, key)
        return changed

    async def admit(self, workflow: str, key: str) -> int:
        """One admission of (``workflow``, ``key``), then the follow-ups of what it changed (a
        cancelled parent's children, a finished child's parent); how many instances it changed."""
        inst = self.instances
        changed = await inst.store.admit(workflow, key, self._action)
        for state, changes in changed:
            inst.timings.committed(None, state, changes)
            await inst.subflows.follow_up(state, changes)
        return len(changed)

    def _action(
        self,
        live: list[tuple[LoadedDefinition, InstanceState]],
        waiting: list[tuple[LoadedDefinition, InstanceState]],
        now: int,
    ) -> list[tuple[InstanceState, Changes]]:
        """Decide (wiggle/_engine/workflow_limits.py ``decide``) and carry it out."""
        engine = self.instances.engine
        limits = [(st.instance, _limit_of(loaded, st)) for loaded, st in waiting]
        decision = rules.decide([st.instance for _, st in live], limits)
        by_id = {st.instance.id: (loaded, st) for loaded, st in (*live, *waiting)}
        out: list[tuple[InstanceState, Changes]] = []
        for instance_id, reason in decision.cancel:
            out.append((by_id[instance_id][1], rules.cancel(engine, by_id[instance_id][1], reason, now)))
        for instance_id in decision.begin:
            loaded, state = by_id[instance_id]
            try:
                changes = rules.admit(engine, loaded, state, now)
            except WiggleError as exc:  # it cannot begin (never expected: checked when it was held)
                changes = Changes()
                fail_instance(
                    state, f"could not begin after waiting for a concurrency slot: {exc}", now, changes
                )
            out.append((state, changes))
        return out


def _limit_of(loaded: LoadedDefinition, state: InstanceState) -> Limit:
    """The limit of the version ``state`` runs (its recorded max if that version has none)."""
    limit = loaded.definition.concurrency
    return limit if limit is not None else Limit(key="", max=max(state.instance.conc_max, 1))
