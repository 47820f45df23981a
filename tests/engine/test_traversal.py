"""GraphTraversal (design doc §7): successor, classify -> Handback, plan, is_checkpoint.

Runs against ``wiggle._fast.CompiledGraph`` (the selected implementation) and against each twin
explicitly, so a divergence between them shows up here as well as in tests/fast.
"""

from __future__ import annotations

import importlib
import os

import pytest

from wiggle import Handback, Workflow, _fast
from wiggle._model import Node, NodeKind, WorkflowDefinition

# WIGGLE_IMPL=python runs the pure twin only; otherwise a compiled twin that does not import is
# a test error, never a skip (as in tests/fast).
_TWINS = ["python"] if os.environ.get("WIGGLE_IMPL", "").strip().lower() == "python" else ["python", "cython"]


@pytest.fixture(params=["selected", *_TWINS])
def graph_cls(request: pytest.FixtureRequest):
    """The CompiledGraph class under test."""
    if request.param == "selected":
        return _fast.CompiledGraph
    module = importlib.import_module(f"wiggle._fast.traversal_{'py' if request.param == 'python' else 'c'}")
    return module.CompiledGraph


def _h(name: str):
    def handler(ctx):
        return ctx

    handler.__name__ = name
    return handler


def _definition() -> WorkflowDefinition:
    """One of everything: tasks, a gate, a choose, a loop, other queues, sleep, fork/join, user task."""
    return (
        Workflow.define("trav")
        .step(_h("a"))
        .gate(_h("g"))
        .step(_h("pay"), queue="payments")
        .checkpoint()
        .choose(_h("c"), if_true=lambda b: b.step(_h("yes")), if_false=lambda b: b.step(_h("no")))
        .loop(_h("more"), lambda b: b.step(_h("body")))
        .sleep("nap", 1)
        .fork(lambda b: b.step(_h("left")), lambda b: b.step(_h("right")))
        .join()
        .user_task("approval")
        .step(_h("z"))
        .build()
        .definition
    )


@pytest.fixture
def definition() -> WorkflowDefinition:
    return _definition()


@pytest.fixture
def graph(graph_cls, definition):
    return graph_cls(definition)


# ---------------------------------------------------------------------------- successor


def test_successor_of_tasks_ignores_the_predicate_value(graph) -> None:
    assert graph.successor("a") == "g"
    assert graph.successor("a", True) == "g"
    assert graph.successor("a", False) == "g"
    assert graph.successor("pay", False) == "c"
    assert graph.successor("z") == "end"


def test_successor_of_a_gate(graph) -> None:
    assert graph.successor("g", True) == "pay"
    assert graph.successor("g", False) == "gated.g"


def test_successor_of_a_choose(graph) -> None:
    assert graph.successor("c", True) == "yes"
    assert graph.successor("c", False) == "no"
    assert graph.successor("yes") == graph.successor("no") == "more"


def test_successor_of_a_loop(graph) -> None:
    assert graph.successor("more", True) == "body"
    assert graph.successor("body") == "more"
    assert graph.successor("more", False) == "nap"


def test_successor_of_fork_branch_steps_is_the_join(graph) -> None:
    assert graph.successor("left") == "join"
    assert graph.successor("right") == "join"


def test_successor_agrees_with_the_definition(graph, definition) -> None:
    for node in definition.nodes:
        if node.is_worker_step:
            assert graph.successor(node.id, True) == node.next
            expected_false = node.alt_next if node.kind is NodeKind.PREDICATE else node.next
            assert graph.successor(node.id, False) == expected_false
            assert _fast.successor(node, True) == node.next
            assert _fast.successor(node, False) == expected_false


# ---------------------------------------------------------------------------- classify


@pytest.mark.parametrize(
    "node_id, expected",
    [
        ("a", None),  # same-queue TASK
        ("g", None),  # same-queue PREDICATE
        ("c", None),
        ("more", None),
        ("body", None),
        ("pay", Handback.OTHER_QUEUE),
        ("nap", Handback.SLEEP),
        ("fork", Handback.FORK),
        ("join", Handback.JOIN),
        ("approval", Handback.USER_TASK),
        ("end", Handback.TERMINAL),
        ("gated.g", Handback.TERMINAL),
    ],
)
def test_classify(graph, definition, node_id: str, expected) -> None:
    queues = {"trav"}
    assert graph.classify(node_id, queues) is expected
    node = definition.node_map()[node_id]
    assert _fast.classify(node, queues, definition.name) is expected


def test_classify_other_queue_served_runs_locally(graph, definition) -> None:
    assert graph.classify("pay", {"trav", "payments"}) is None
    assert graph.classify("pay", frozenset({"payments"})) is None
    assert graph.classify("a", {"payments"}) is Handback.OTHER_QUEUE
    assert graph.classify("a", set()) is Handback.OTHER_QUEUE
    assert _fast.classify(definition.node_map()["pay"], ["payments"], "trav") is None


def test_classify_boundaries_do_not_depend_on_queues(graph) -> None:
    for queues in (set(), {"trav"}, {"trav", "payments"}):
        assert graph.classify("nap", queues) is Handback.SLEEP
        assert graph.classify("fork", queues) is Handback.FORK
        assert graph.classify("join", queues) is Handback.JOIN
        assert graph.classify("approval", queues) is Handback.USER_TASK
        assert graph.classify("end", queues) is Handback.TERMINAL


def test_default_queue_is_the_workflow_name(graph_cls) -> None:
    definition = WorkflowDefinition(
        name="named",
        start_node="a",
        nodes=(
            Node(id="a", kind=NodeKind.TASK, next="b"),
            Node(id="b", kind=NodeKind.TASK, next="end", queue="named"),
            Node(id="end", kind=NodeKind.END),
        ),
    ).validate()
    graph = graph_cls(definition)
    assert graph.classify("a", {"named"}) is None
    assert graph.classify("b", {"named"}) is None
    assert graph.classify("a", {"default"}) is Handback.OTHER_QUEUE


# ---------------------------------------------------------------------------- checkpoints and plan


def test_is_checkpoint(graph, definition) -> None:
    for node in definition.nodes:
        assert graph.is_checkpoint(node.id) is (node.id == "pay")


def _linear(graph_cls, checkpoints=()):
    wf = Workflow.define("lin")
    for name in ("s1", "s2", "s3", "s4"):
        wf = wf.step(_h(name))
        if name in checkpoints:
            wf = wf.checkpoint()
    wf = wf.step(_h("s5"), queue="other").gate(_h("s6")).step(_h("s7")).sleep("nap", 1).step(_h("s8"))
    return graph_cls(wf.build().definition)


def test_plan_runs_to_the_next_boundary(graph_cls) -> None:
    graph = _linear(graph_cls)
    assert graph.plan("s1", {"lin"}, 0) == ["s1", "s2", "s3", "s4"]  # s5 is on another queue
    assert graph.plan("s3", {"lin"}, 0) == ["s3", "s4"]
    assert graph.plan("s1", {"lin", "other"}, 0) == [
        "s1",
        "s2",
        "s3",
        "s4",
        "s5",
        "s6",
    ]  # stops after a predicate
    assert graph.plan("s7", {"lin"}, 0) == ["s7"]  # the sleep is a boundary
    assert graph.plan("s8", {"lin"}, 0) == ["s8"]  # END is a boundary


def test_plan_respects_max_steps(graph_cls) -> None:
    graph = _linear(graph_cls)
    assert graph.plan("s1", {"lin"}, 1) == ["s1"]
    assert graph.plan("s1", {"lin"}, 3) == ["s1", "s2", "s3"]
    assert graph.plan("s1", {"lin"}, 100) == ["s1", "s2", "s3", "s4"]


def test_plan_stops_after_a_checkpoint(graph_cls) -> None:
    graph = _linear(graph_cls, checkpoints=("s2",))
    assert graph.is_checkpoint("s2") and not graph.is_checkpoint("s1")
    assert graph.plan("s1", {"lin"}, 0) == ["s1", "s2"]
    assert graph.plan("s3", {"lin"}, 0) == ["s3", "s4"]


def test_plan_from_a_boundary_or_foreign_queue_is_empty(graph_cls) -> None:
    graph = _linear(graph_cls)
    assert graph.plan("nap", {"lin"}, 0) == []
    assert graph.plan("end", {"lin"}, 0) == []
    assert graph.plan("s5", {"lin"}, 0) == []
    assert graph.plan("s1", set(), 0) == []


def test_plan_of_a_loop_stops_at_the_predicate(graph) -> None:
    assert graph.plan("body", {"trav"}, 0) == ["body", "more"]
    assert graph.plan("a", {"trav"}, 0) == ["a", "g"]
    assert graph.plan("left", {"trav"}, 0) == ["left"]  # then the join
