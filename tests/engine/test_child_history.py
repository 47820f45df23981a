"""A sub-workflow's history: every attempt records its child's start before its outcome, even when
the child finishes before the parent has recorded its start (wiggle/_engine/children.py)."""

from __future__ import annotations

import msgspec

from wiggle import RetryPolicy, Workflow
from wiggle._engine import children
from wiggle._engine.config import LoadedDefinition
from wiggle._engine.engine import Engine
from wiggle._engine.state import HistoryOutcome, InstanceStatus, TokenStatus

NOW = 1_700_000_000_000


def _kid(ctx: dict) -> dict:
    return ctx


def _parent() -> tuple[Engine, LoadedDefinition, LoadedDefinition]:
    kid = Workflow.define("kid").step(_kid).build()
    parent = Workflow.define("parent").sub_workflow("call", kid, retry=RetryPolicy.fixed(3, 0)).build()
    return Engine(), LoadedDefinition(parent.definition), LoadedDefinition(kid.definition)


def _child_ended(engine: Engine, kid: LoadedDefinition, child_id: str, status: InstanceStatus, at: int):
    state, _ = engine.start(kid, child_id, {"k": 1}, "", at)
    return msgspec.structs.replace(state.instance, status=status, error="kid broke", finished_at=at + 5)


def test_a_child_that_finishes_before_its_start_is_recorded_gets_both_entries() -> None:
    engine, parent, kid = _parent()
    state, _ = engine.start(parent, "wi-parent", {}, "", NOW)
    (tok,) = state.tokens.values()
    assert (tok.status, tok.started_at) == (TokenStatus.AWAITING, 0)  # the child is due to start
    first_child = tok.child_id
    # the clock duty inserted the child (at NOW + 1); it failed (NOW + 6) before the parent's
    # transition recording its start ran
    child = _child_ended(engine, kid, first_child, InstanceStatus.FAILED, NOW + 1)
    changes = children.child_finished(engine, parent, state, tok.id, child, NOW + 10)
    assert changes is not None
    assert [(h.outcome, h.attempt, h.child_id) for h in changes.history] == [
        (HistoryOutcome.CHILD_STARTED, 1, first_child),
        (HistoryOutcome.RETRY, 1, first_child),
    ]
    started, retry = changes.history
    assert (started.started_at, started.ended_at) == (NOW + 1, NOW + 1)  # the child's own start
    assert retry.started_at == NOW + 1 and "kid broke" in retry.error
    # the late record of that start finds the token waiting for the next child: nothing twice
    assert children.child_started(engine, state, tok.id, first_child, NOW + 11) is None
    second_child = tok.child_id
    assert second_child != first_child and tok.attempt == 2 and tok.started_at == 0

    # the usual order: the start is recorded, then the child finishes; one CHILD_STARTED each
    recorded = children.child_started(engine, state, tok.id, second_child, NOW + 20)
    assert recorded is not None
    assert [(h.outcome, h.attempt) for h in recorded.history] == [(HistoryOutcome.CHILD_STARTED, 2)]
    child = _child_ended(engine, kid, second_child, InstanceStatus.COMPLETED, NOW + 19)
    done = children.child_finished(engine, parent, state, tok.id, child, NOW + 30)
    assert done is not None
    assert [(h.outcome, h.attempt) for h in done.history if h.node_id == "call"] == [
        (HistoryOutcome.COMPLETED, 2)
    ]
    assert state.instance.status == InstanceStatus.COMPLETED
