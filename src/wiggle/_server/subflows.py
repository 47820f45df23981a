"""Sub-workflows across instances: start a waiting token's child, resume the parent, cancel children.

The engine's transitions (wiggle/_engine/children.py) each change one instance; this module
chains them over the store, each step idempotent so a crash between two steps is made good by
repeating them (docs/semantics.md#sub-workflows):

1. the parent's transition parks the token with the child's id stored on it (due at once);
2. the clock duty inserts the child under that id unless it exists, then records the start on the
   parent (``child_started``);
3. the child's finishing transition is followed by ``child_finished`` on the parent; if that
   follow-up is lost, the parent's token, due again every ``child_recheck_millis``, finds the
   child finished at its next check (step 2 again) and resumes then;
4. a parent token cancelled (the parent cancelled, or failed elsewhere) cancels its child, and so
   on down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .. import _tracing as tracing
from .._engine import children
from .._engine.engine import LoadedDefinition
from .._engine.start_options import StartOptions
from .._engine.state import (
    LIVE_INSTANCE_STATUSES,
    Changes,
    Instance,
    InstanceState,
    Token,
    TokenStatus,
)
from .._model import NodeKind, WorkflowDefinition
from ..errors import FailedPrecondition, NotFound, WiggleError

if TYPE_CHECKING:
    from .instances import Instances

__all__ = ["SubWorkflows", "check_children_registered", "may_need_follow_up", "spawns_children"]

log = logging.getLogger("wiggle.server")

ORPHAN_BATCH = 200  # children cancelled per sweep
ORPHAN_SWEEP_MILLIS = 60_000  # how often the clock leader looks for orphaned children

Lookup = Callable[[str, str], Awaitable[object]]


async def check_children_registered(definition: WorkflowDefinition, lookup: Lookup) -> None:
    """FailedPrecondition naming the node if a SUB_WORKFLOW names a workflow (version) not registered.

    A workflow may start itself (the depth limit bounds it); every other child must exist first.
    """
    for node in definition.nodes:
        if node.kind is not NodeKind.SUB_WORKFLOW or node.workflow is None:
            continue
        if node.workflow == definition.name and node.version is None:
            continue
        try:
            await lookup(node.workflow, node.version or "")
        except NotFound:
            pinned = f" version {node.version!r}" if node.version else ""
            raise FailedPrecondition(
                f"sub-workflow node {node.id!r} of {definition.name!r} starts workflow "
                f"{node.workflow!r}{pinned}, which is not registered; register it first"
            ) from None


#: LoadedDefinition -> whether it has a SUB_WORKFLOW node (only such a node's token has a child)
_SPAWNS: dict[LoadedDefinition, bool] = {}


def spawns_children(loaded: LoadedDefinition) -> bool:
    """Whether an instance of ``loaded`` can have tokens waiting for children (cached per definition)."""
    found = _SPAWNS.get(loaded)
    if found is None:
        if len(_SPAWNS) > 10_000:  # definitions loaded again and again: start afresh
            _SPAWNS.clear()
        found = any(node.kind is NodeKind.SUB_WORKFLOW for node in loaded.definition.nodes)
        _SPAWNS[loaded] = found
    return found


def may_need_follow_up(state: InstanceState, changes: Changes, spawns: bool) -> bool:
    """Whether committed ``changes`` may need ``SubWorkflows.follow_up`` (asked by
    ``Instances.mutate``, wiggle/_server/instances.py): the instance, a child, finished, or (``spawns``: its definition has SUB_WORKFLOW nodes) a token
    that has a child changed. Most transitions involve neither and skip the follow-up's call."""
    if changes.finished and state.instance.parent_id:
        return True
    if spawns:
        for token in changes.tokens.values():
            if token.child_id:
                return True
    return False


class SubWorkflows:
    """The cross-instance steps of sub-workflows, over an ``Instances``."""

    def __init__(self, instances: Instances) -> None:
        self.instances = instances

    # ------------------------------------------------------------------ after a transition

    async def follow_up(self, state: InstanceState, changes: Changes) -> None:
        """After a committed transition: wake the parent of a finished child; cancel the children
        of cancelled waiting tokens. Never raises (the transition itself is committed)."""
        try:
            if changes.finished and state.instance.parent_id:
                await self.resume_parent(state.instance)
            for tok in list(changes.tokens.values()):
                if tok.status == TokenStatus.CANCELLED and tok.child_id and tok.kind == NodeKind.SUB_WORKFLOW:
                    await self.cancel_child(tok.child_id, state.instance)
        except Exception as exc:  # the recheck makes good a lost wake-up (docs/semantics.md#sub-workflows)
            log.warning("sub-workflow follow-up of %s failed: %s", state.instance.id, exc)

    async def resume_parent(self, child: Instance) -> None:
        """Apply a finished child to the parent token waiting for it (a no-op if it waits no more)."""
        engine = self.instances.engine

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes | None]:
            return None, children.child_finished(engine, loaded, state, child.parent_token, child, now)

        try:
            await self.instances.mutate(child.parent_id, f"parent instance {child.parent_id} is gone", action)
        except NotFound:
            pass  # the parent was purged

    async def cancel_child(self, child_id: str, parent: Instance) -> None:
        """Cancel a child whose parent no longer waits for it (it may not have started yet)."""
        try:
            await self.instances.cancel(
                child_id, f"parent {parent.id} is {parent.status or 'no longer waiting'}", by_operator=False
            )
        except NotFound:
            pass  # never started: the clock duty will not start it (its token is not waiting)

    async def sweep_orphans(self, limit: int = ORPHAN_BATCH) -> int:
        """Cancel running children whose parent is finished or gone (a crash lost the cascade of
        ``follow_up``); how many were cancelled."""
        cancelled = 0
        for child_id, parent_id in await self.instances.store.orphaned_children(limit):
            try:
                _, changed = await self.instances.cancel(
                    child_id, f"parent {parent_id} is no longer running", by_operator=False
                )
            except NotFound:
                continue
            cancelled += changed
        return cancelled

    # ------------------------------------------------------------------ the clock duty

    async def start_child(self, spec: children.ChildSpec) -> None:
        """Start the child of a due waiting token unless it exists, then record it on the parent."""
        inst = self.instances
        store = inst.store
        child: Instance | None
        try:
            child = (await store.get_instance(spec.child_id)).instance
        except NotFound:
            child = await self._insert_child(spec)
        if child is None:
            return
        engine = inst.engine

        def started(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[bool, Changes | None]:
            changes = children.child_started(engine, state, spec.parent_token, spec.child_id, now)
            return changes is not None, changes

        waits, parent = await inst.mutate(
            spec.parent_id, f"instance {spec.parent_id} does not exist", started
        )
        if not waits:  # the parent was cancelled (or failed) while the child was being started
            if child.status in LIVE_INSTANCE_STATUSES:
                await self.cancel_child(child.id, parent.instance)
            return
        if child.status not in LIVE_INSTANCE_STATUSES:  # (a child waiting for a slot is live)
            await self.resume_parent(child)

    async def _insert_child(self, spec: children.ChildSpec) -> Instance | None:
        inst = self.instances
        try:
            record = await inst.store.get_workflow(spec.workflow, spec.version)
            now = inst.now()
            parent = (spec.parent_id, spec.parent_token, spec.depth)
            state, changes = inst.engine.start(
                record.loaded,
                spec.child_id,
                spec.context,
                spec.correlation_id,
                now,
                parent,
                options=StartOptions(priority=spec.priority),  # inherited (docs/flow-control.md#priorities)
            )
        except WiggleError as exc:
            await self._not_started(spec, str(exc))
            return None
        state.instance.traceparent = child_traceparent(spec)  # the parent's trace (tracing)
        try:
            await inst.store.insert(state, changes)
        except Exception:
            # Another clock leader inserted it first (a leader change): that one stands.
            try:
                return (await inst.store.get_instance(spec.child_id)).instance
            except NotFound:
                raise
        inst.timings.inserted(record.loaded, state, changes, "sub_workflow")
        if state.instance.conc_key:  # it waits for an admission (workflow_limits.py)
            await inst.limits.after((state,))
            return (await inst.store.get_instance(spec.child_id)).instance
        return state.instance

    async def _not_started(self, spec: children.ChildSpec, error: str) -> None:
        engine = self.instances.engine
        message = f"sub-workflow {spec.workflow!r} could not start: {error}"

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes | None]:
            return None, children.child_not_started(
                engine, loaded, state, spec.parent_token, spec.child_id, message, now
            )

        await self.instances.mutate(spec.parent_id, f"instance {spec.parent_id} does not exist", action)


def child_traceparent(spec: children.ChildSpec) -> str:
    """The trace a child instance's steps join: its parent's (docs/semantics.md#tracing).

    With tracing on, under a ``wiggle.sub_workflow <workflow>`` span of the parent's trace, so a
    child's steps are grouped under the node that started it; else the parent's traceparent as is.
    """
    if not spec.traceparent or not tracing.active():
        return spec.traceparent
    attributes = {
        "wiggle.instance_id": spec.child_id,
        "wiggle.parent_instance_id": spec.parent_id,
        "wiggle.workflow": spec.workflow,
    }
    with tracing.span(f"wiggle.sub_workflow {spec.workflow}", tracing.INTERNAL, spec.traceparent, attributes):
        return tracing.traceparent() or spec.traceparent


def due_child(
    loaded: LoadedDefinition, state: InstanceState, token: Token, now: int
) -> children.ChildSpec | None:
    """The child a due SUB_WORKFLOW token must (re)check, or None if ``token`` is not one."""
    if token.kind != NodeKind.SUB_WORKFLOW or token.status != TokenStatus.AWAITING:
        return None
    if not 0 < token.available_at <= now or not token.child_id:
        return None
    return children.child_spec(loaded, state, token)
