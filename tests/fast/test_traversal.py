"""Graph traversal (successor, classify, CompiledGraph), on each implementation."""

from __future__ import annotations

import copy
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from wiggle._model import Handback, Node, NodeKind, RetryPolicy, WorkflowDefinition

from .conftest import Impl

# fetch (TASK) -> check (PREDICATE) -true-> fork (FORK: left, right) ... join (JOIN) -> tally (TASK)
#                                 -false-> nap (SLEEP) -> approve (USER_TASK) -> fork
#                                                          `-timeout-> rejected (END, failed)
# left (TASK, queue gpu) -> join; right (TASK, checkpoint) -> right2 (TASK) -> join
# tally (TASK, checkpoint) -> score (PREDICATE, queue gpu) -> done (END) | again (TASK) -> done
KINDS_DEMO = WorkflowDefinition(
    name="orders",
    start_node="fetch",
    nodes=(
        Node(id="fetch", kind=NodeKind.TASK, next="check", retry=RetryPolicy.none()),
        Node(id="check", kind=NodeKind.PREDICATE, next="fork", alt_next="nap"),
        Node(id="nap", kind=NodeKind.SLEEP, sleep_millis=1000, next="approve"),
        Node(id="approve", kind=NodeKind.USER_TASK, next="fork", alt_next="rejected", timeout_millis=60_000),
        Node(id="fork", kind=NodeKind.FORK, branches=("left", "right"), join="join"),
        Node(id="left", kind=NodeKind.TASK, queue="gpu", next="join"),
        Node(id="right", kind=NodeKind.TASK, next="right2"),
        Node(id="right2", kind=NodeKind.TASK, queue="orders", next="join"),
        Node(id="join", kind=NodeKind.JOIN, fork="fork", next="tally"),
        Node(id="tally", kind=NodeKind.TASK, next="score"),
        Node(id="score", kind=NodeKind.PREDICATE, queue="gpu", next="done", alt_next="again"),
        Node(id="again", kind=NodeKind.TASK, next="done"),
        Node(id="done", kind=NodeKind.END),
        Node(id="rejected", kind=NodeKind.END, success=False, reason="not approved"),
    ),
    checkpoints=("right", "tally"),
).validate()

LINEAR = WorkflowDefinition(
    name="line",
    start_node="s0",
    nodes=tuple(Node(id=f"s{i}", kind=NodeKind.TASK, next=f"s{i + 1}") for i in range(19))
    + (Node(id="s19", kind=NodeKind.END),),
).validate()

NODES = {n.id: n for n in KINDS_DEMO.nodes}
T, P, S, F, J, U, E = range(7)


# module functions -------------------------------------------------------------------------------


def test_kind_codes_are_the_documented_ones(impl: Impl) -> None:
    t = impl.traversal
    assert (t.TASK, t.PREDICATE, t.SLEEP, t.FORK, t.JOIN, t.USER_TASK, t.END) == (0, 1, 2, 3, 4, 5, 6)


def test_successor_of_a_task_is_next_whatever_the_predicate_value(impl: Impl) -> None:
    assert impl.traversal.successor(NODES["fetch"]) == "check"
    assert impl.traversal.successor(NODES["fetch"], False) == "check"


def test_successor_of_a_predicate_follows_its_value(impl: Impl) -> None:
    assert impl.traversal.successor(NODES["check"]) == "fork"
    assert impl.traversal.successor(NODES["check"], True) == "fork"
    assert impl.traversal.successor(NODES["check"], False) == "nap"
    assert impl.traversal.successor(NODES["check"], predicate_value=0) == "nap"
    assert impl.traversal.successor(NODES["check"], predicate_value=[1]) == "fork"


def test_successor_of_other_kinds_is_next(impl: Impl) -> None:
    assert impl.traversal.successor(NODES["approve"], False) == "fork"
    assert impl.traversal.successor(NODES["done"]) is None
    assert impl.traversal.successor(NODES["join"]) == "tally"


@pytest.mark.parametrize(
    ("node_id", "queues", "expected"),
    [
        ("fetch", {"orders"}, None),  # the default queue is the workflow name
        ("fetch", {"gpu"}, Handback.OTHER_QUEUE),
        ("left", {"gpu"}, None),
        ("left", {"orders"}, Handback.OTHER_QUEUE),
        ("check", frozenset({"orders", "gpu"}), None),
        ("score", ["orders"], Handback.OTHER_QUEUE),
        ("nap", {"orders"}, Handback.SLEEP),
        ("fork", {"orders"}, Handback.FORK),
        ("join", {"orders"}, Handback.JOIN),
        ("approve", {"orders"}, Handback.USER_TASK),
        ("done", {"orders"}, Handback.TERMINAL),
        ("rejected", set(), Handback.TERMINAL),
    ],
)
def test_classify(impl: Impl, node_id: str, queues: Any, expected: Handback | None) -> None:
    assert impl.traversal.classify(NODES[node_id], queues, "orders") is expected
    graph = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert graph.classify(node_id, queues) is expected


def test_classify_uses_the_default_queue_given(impl: Impl) -> None:
    assert impl.traversal.classify(NODES["fetch"], ("elsewhere",), "elsewhere") is None
    assert impl.traversal.classify(NODES["fetch"], ("orders",), "elsewhere") is Handback.OTHER_QUEUE


def test_classify_errors_match_the_reference(impl: Impl, reference: Impl) -> None:
    class Fake:
        def __init__(self, kind: Any) -> None:
            self.kind = kind
            self.queue = None

    for node, queues in [(Fake(NodeKind.TASK), None), (Fake("TASK"), ()), (Fake(7), ()), (Fake(None), ())]:
        with pytest.raises(Exception) as expected:
            reference.traversal.classify(node, queues, "q")
        with pytest.raises(type(expected.value)) as got:
            impl.traversal.classify(node, queues, "q")
        assert str(got.value) == str(expected.value)
    # a plain string equal to a boundary kind works in both (NodeKind is a str enum)
    assert impl.traversal.classify(Fake("SLEEP"), (), "q") is Handback.SLEEP


# CompiledGraph ----------------------------------------------------------------------------------


def test_compiled_graph_arrays(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    ids = [n.id for n in KINDS_DEMO.nodes]
    assert g.ids == ids
    assert g.index == {node_id: i for i, node_id in enumerate(ids)}
    assert g.kinds == [T, P, S, U, F, T, T, T, J, T, P, T, E, E]
    assert g.nexts == [ids.index(n.next) if n.next else -1 for n in KINDS_DEMO.nodes]
    assert g.alts == [-1, ids.index("nap"), -1, ids.index("rejected")] + [-1] * 6 + [
        ids.index("again"),
        -1,
        -1,
        -1,
    ]
    assert g.queues == ["orders"] * 5 + [
        "gpu",
        "orders",
        "orders",
        "orders",
        "orders",
        "gpu",
        "orders",
        "orders",
        "orders",
    ]
    assert g.checkpoints == [n.id in ("right", "tally") for n in KINDS_DEMO.nodes]
    assert all(type(c) is bool for c in g.checkpoints)


def test_compiled_graph_successor_and_is_checkpoint(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    for node in KINDS_DEMO.nodes:
        for value in (True, False):
            assert g.successor(node.id, value) == impl.traversal.successor(node, value)
        assert g.successor(node.id) == impl.traversal.successor(node)
        assert g.is_checkpoint(node.id) is (node.id in ("right", "tally"))


def test_compiled_graph_unknown_node_is_a_key_error(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    calls: list[Callable[[], object]] = [
        lambda: g.successor("nope"),
        lambda: g.classify("nope", {"orders"}),
        lambda: g.is_checkpoint("nope"),
        lambda: g.plan("nope", {"orders"}, 0),
    ]
    for call in calls:
        with pytest.raises(KeyError) as info:
            call()
        assert info.value.args == ("nope",)
    with pytest.raises(TypeError):
        g.successor(["unhashable"])


@pytest.mark.parametrize(
    ("start", "queues", "max_steps", "expected"),
    [
        ("fetch", {"orders"}, 0, ["fetch", "check"]),  # stops after a predicate
        ("fetch", {"orders"}, 1, ["fetch"]),
        ("fetch", {"gpu"}, 0, []),  # the first step is on another queue
        ("right", {"orders"}, 0, ["right"]),  # stops after a checkpoint
        ("right2", {"orders"}, 0, ["right2"]),  # stops before the join
        ("left", {"gpu"}, 5, ["left"]),
        ("tally", {"orders", "gpu"}, 0, ["tally"]),  # a checkpoint
        ("again", {"orders"}, 0, ["again"]),  # stops before the END
        ("score", {"gpu"}, -3, ["score"]),  # negative: no cap
        ("nap", {"orders"}, 0, []),  # a boundary runs nothing
        ("done", {"orders"}, 0, []),
    ],
)
def test_plan(impl: Impl, start: str, queues: set[str], max_steps: int, expected: list[str]) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert g.plan(start, queues, max_steps) == expected


def test_plan_on_a_linear_graph(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(LINEAR)
    everything = [f"s{i}" for i in range(19)]
    assert g.plan("s0", {"line"}, 0) == everything
    assert g.plan("s0", {"line"}, 100) == everything
    assert g.plan("s0", {"line"}, 5) == everything[:5]
    assert g.plan("s17", {"line"}, 0) == ["s17", "s18"]
    assert g.plan("s0", {"line"}, 2.5) == everything[:3]  # compared as Python compares
    assert g.plan("s0", {"line"}, True) == ["s0"]
    assert g.plan("s0", {"line"}, 10**30) == everything


def test_plan_with_a_cycle_is_capped(impl: Impl) -> None:
    loop = WorkflowDefinition(
        name="loop",
        start_node="a",
        nodes=(Node(id="a", kind=NodeKind.TASK, next="b"), Node(id="b", kind=NodeKind.TASK, next="a")),
    )
    g = impl.traversal.CompiledGraph(loop)
    assert g.plan("a", {"loop"}, 0) == ["a", "b", "a"]  # no cap: one more than the node count
    assert g.plan("b", {"loop"}, 7) == ["b", "a", "b", "a", "b", "a", "b"]


def test_plan_bad_max_steps_matches_the_reference(impl: Impl, reference: Impl) -> None:
    for bad in (None, "3", [1]):
        with pytest.raises(Exception) as expected:
            reference.traversal.CompiledGraph(LINEAR).plan("s0", {"line"}, bad)
        with pytest.raises(type(expected.value)) as got:
            impl.traversal.CompiledGraph(LINEAR).plan("s0", {"line"}, bad)
        assert str(got.value) == str(expected.value)


def test_compiled_graph_of_a_broken_definition_raises_like_the_reference(impl: Impl, reference: Impl) -> None:
    dangling = WorkflowDefinition(
        name="w", start_node="a", nodes=(Node(id="a", kind=NodeKind.TASK, next="ghost"),)
    )
    dangling_alt = WorkflowDefinition(
        name="w", start_node="a", nodes=(Node(id="a", kind=NodeKind.PREDICATE, next="a", alt_next="ghost"),)
    )
    for definition in (dangling, dangling_alt):
        with pytest.raises(KeyError) as expected:
            reference.traversal.CompiledGraph(definition)
        with pytest.raises(KeyError) as got:
            impl.traversal.CompiledGraph(definition)
        assert got.value.args == expected.value.args == ("ghost",)


def test_compiled_graph_of_an_empty_definition(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(WorkflowDefinition(name="w", start_node="a", nodes=()))
    assert (g.ids, g.kinds, g.nexts, g.alts, g.queues, g.checkpoints, g.index) == ([], [], [], [], [], [], {})


def test_compiled_graph_checkpoint_marks_on_unknown_ids_are_ignored(impl: Impl) -> None:
    d = WorkflowDefinition(
        name="w", start_node="a", nodes=(Node(id="a", kind=NodeKind.TASK),), checkpoints=("a", "zzz")
    )
    assert impl.traversal.CompiledGraph(d).checkpoints == [True]


def test_compiled_graph_is_independent_of_its_definition(impl: Impl) -> None:
    g1 = impl.traversal.CompiledGraph(LINEAR)
    g2 = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert g1.plan("s0", {"line"}, 3) == ["s0", "s1", "s2"]
    assert g2.plan("fetch", {"orders"}, 0) == ["fetch", "check"]


def test_compiled_graph_can_be_reinitialised(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(LINEAR)
    g.__init__(KINDS_DEMO)
    assert g.ids[0] == "fetch" and g.plan("fetch", {"orders"}, 0) == ["fetch", "check"]


def test_compiled_graph_methods_are_documented_alike(impl: Impl, reference: Impl) -> None:
    for name in ("successor", "classify", "is_checkpoint", "plan"):
        assert inspect.getdoc(getattr(impl.traversal.CompiledGraph, name)) == inspect.getdoc(
            getattr(reference.traversal.CompiledGraph, name)
        )


def test_compiled_graph_pickles_and_copies(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    for clone in (pickle.loads(pickle.dumps(g)), copy.copy(g), copy.deepcopy(g)):
        assert type(clone) is type(g)
        for attr in ("ids", "index", "kinds", "nexts", "alts", "queues", "checkpoints"):
            assert getattr(clone, attr) == getattr(g, attr), attr
        assert clone.plan("fetch", {"orders"}, 0) == ["fetch", "check"]
