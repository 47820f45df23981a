"""FOR_EACH in the pure engine: a large list is worked through a slice at a time."""

from __future__ import annotations

import pytest

from wiggle import Workflow
from wiggle._engine.engine import Engine, EngineConfig, LoadedDefinition
from wiggle._engine.state import Changes, InstanceStatus, TokenStatus
from wiggle._model import Node, NodeKind, WorkflowDefinition
from wiggle.errors import InvalidArgument


def _double(ctx):  # pragma: no cover - never run: the test plays the worker
    return ctx


def test_ten_thousand_elements_never_one_giant_transition() -> None:
    bp = Workflow.define("big").for_each("items", lambda b: b.step(_double), concurrency=50).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine()
    n = 10_000
    state, changes = engine.start(loaded, "wi-big", {"items": list(range(n))}, "", 1)
    assert len(changes.tokens) <= 51  # the parent token and the first 50 branches
    (join,) = state.instance.joins.values()
    assert join.base == {} and join.base_is_context  # the list is not repeated in the join
    largest = 0
    transitions = 0
    while state.instance.status == InstanceStatus.RUNNING:
        ready = [t for t in state.tokens.values() if t.status == TokenStatus.READY]
        assert 0 < len(ready) <= 50
        for tok in ready:
            engine.claim(loaded, state, tok, "w", 2, Changes())
            ctx = dict(tok.context or {})
            ctx["result"] = ctx["item"] * 2
            step = engine.complete(loaded, state, tok.id, "w", 3, context=ctx)
            largest = max(largest, len(step.tokens))
            transitions += 1
    assert transitions == n
    assert largest <= 2  # a branch finishes and (at most) one token takes the next element
    assert state.instance.status == InstanceStatus.COMPLETED
    assert state.instance.context["results"] == [2 * i for i in range(n)]
    assert state.instance.joins == {}


def test_not_a_list_at_start_raises_before_anything_exists() -> None:
    bp = Workflow.define("bad").for_each("items", lambda b: b.step(_double)).build()
    with pytest.raises(InvalidArgument, match="context key 'items' must be a list, but it is a int"):
        Engine().start(LoadedDefinition(bp.definition), "wi-bad", {"items": 3}, "", 1)


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        (
            (Node(id="fe", kind=NodeKind.FOR_EACH, branches=("b",), join="j"),),
            "for_each 'fe' needs an items_key",
        ),
        (
            (Node(id="fe", kind=NodeKind.FOR_EACH, items_key="xs", branches=("b", "b"), join="j"),),
            "for_each 'fe' needs exactly one body",
        ),
        (
            (Node(id="fe", kind=NodeKind.FOR_EACH, items_key="", branches=("b",), join="j"),),
            "node 'fe': items_key must name a context key",
        ),
        (
            (
                Node(
                    id="fe", kind=NodeKind.FOR_EACH, items_key="xs", branches=("b",), join="j", concurrency=-1
                ),
            ),
            "for_each 'fe': concurrency must be >= 0",
        ),
    ],
)
def test_bad_for_each_definitions_name_the_node(nodes: tuple[Node, ...], message: str) -> None:
    rest = (
        Node(id="b", kind=NodeKind.TASK, next="j"),
        Node(id="j", kind=NodeKind.JOIN, fork="fe", next="end"),
        Node(id="end", kind=NodeKind.END),
    )
    with pytest.raises(InvalidArgument, match=message):
        WorkflowDefinition(name="w", start_node="fe", nodes=nodes + rest).validate()


def test_bad_sub_workflow_definitions_name_the_node() -> None:
    with pytest.raises(InvalidArgument, match="sub-workflow 'call' workflow must not be empty"):
        WorkflowDefinition(
            name="w",
            start_node="call",
            nodes=(
                Node(id="call", kind=NodeKind.SUB_WORKFLOW, workflow="", next="end"),
                Node(id="end", kind=NodeKind.END),
            ),
        ).validate()
    with pytest.raises(InvalidArgument, match="node 'call' \\(SUB_WORKFLOW\\) needs a 'next' edge"):
        WorkflowDefinition(
            name="w",
            start_node="call",
            nodes=(
                Node(id="call", kind=NodeKind.SUB_WORKFLOW, workflow="c"),
                Node(id="end", kind=NodeKind.END),
            ),
        ).validate()


def test_results_beyond_the_payload_limit_fail_the_instance_at_once() -> None:
    bp = Workflow.define("fat").for_each("items", lambda b: b.step(_double), concurrency=4).build()
    loaded = LoadedDefinition(bp.definition)
    engine = Engine(EngineConfig(max_payload_bytes=2_000))
    state, _ = engine.start(loaded, "wi-fat", {"items": list(range(100))}, "", 1)
    done = 0
    while state.instance.status == InstanceStatus.RUNNING:
        for tok in [t for t in state.tokens.values() if t.status == TokenStatus.READY]:
            engine.claim(loaded, state, tok, "w", 2, Changes())
            engine.complete(
                loaded, state, tok.id, "w", 3, context={**(tok.context or {}), "result": "x" * 100}
            )
            done += 1
            if state.instance.status != InstanceStatus.RUNNING:
                break
    assert state.instance.status == InstanceStatus.FAILED
    assert done < 25  # it stopped as soon as the results passed the limit
    assert state.instance.error.startswith("for_each 'for_each': the results reached ")
    assert "of 100 elements; the limit is 2000 bytes (return less at 'result')" in state.instance.error
