"""Graph traversal (CompiledGraph: successor, classify -> Handback, is_checkpoint), on each implementation.

The one traversal suite: every case runs once per twin through the ``impl`` fixture. Two graphs:
KINDS_DEMO, written node by node, and TRAV, built through the workflow DSL as a user would.
"""

from __future__ import annotations

import copy
import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from wiggle import Workflow
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


# successor --------------------------------------------------------------------------------------


def test_kind_codes_are_the_documented_ones(impl: Impl) -> None:
    t = impl.traversal
    assert (t.TASK, t.PREDICATE, t.SLEEP, t.FORK, t.JOIN, t.USER_TASK, t.END) == (0, 1, 2, 3, 4, 5, 6)


def test_successor_of_a_task_is_next_whatever_the_predicate_value(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert g.successor("fetch") == "check"
    assert g.successor("fetch", False) == "check"


def test_successor_of_a_predicate_follows_its_value(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert g.successor("check") == "fork"
    assert g.successor("check", True) == "fork"
    assert g.successor("check", False) == "nap"
    assert g.successor("check", predicate_value=0) == "nap"
    assert g.successor("check", predicate_value=[1]) == "fork"


def test_successor_of_other_kinds_is_next(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert g.successor("approve", False) == "fork"
    assert g.successor("done") is None
    assert g.successor("join") == "tally"


# classify ---------------------------------------------------------------------------------------


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
    graph = impl.traversal.CompiledGraph(KINDS_DEMO)
    assert graph.classify(node_id, queues) is expected


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
        on_false = node.alt_next if node.kind is NodeKind.PREDICATE else node.next
        assert g.successor(node.id, True) == node.next
        assert g.successor(node.id, False) == on_false
        assert g.successor(node.id) == node.next
        assert g.is_checkpoint(node.id) is (node.id in ("right", "tally"))


def test_compiled_graph_unknown_node_is_a_key_error(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    calls: list[Callable[[], object]] = [
        lambda: g.successor("nope"),
        lambda: g.classify("nope", {"orders"}),
        lambda: g.is_checkpoint("nope"),
    ]
    for call in calls:
        with pytest.raises(KeyError) as info:
            call()
        assert info.value.args == ("nope",)
    with pytest.raises(TypeError):
        g.successor(["unhashable"])


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
    assert (g1.successor("s0"), g1.classify("s1", {"line"})) == ("s1", None)
    assert (g2.successor("fetch"), g2.classify("fetch", {"line"})) == ("check", Handback.OTHER_QUEUE)


def test_compiled_graph_can_be_reinitialised(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(LINEAR)
    g.__init__(KINDS_DEMO)
    assert g.ids[0] == "fetch" and g.successor("check", False) == "nap"
    assert g.is_checkpoint("tally")


def test_compiled_graph_methods_are_documented_alike(impl: Impl, reference: Impl) -> None:
    for name in ("successor", "classify", "is_checkpoint"):
        assert inspect.getdoc(getattr(impl.traversal.CompiledGraph, name)) == inspect.getdoc(
            getattr(reference.traversal.CompiledGraph, name)
        )


def test_compiled_graph_pickles_and_copies(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(KINDS_DEMO)
    for clone in (pickle.loads(pickle.dumps(g)), copy.copy(g), copy.deepcopy(g)):
        assert type(clone) is type(g)
        for attr in ("ids", "index", "kinds", "nexts", "alts", "queues", "checkpoints"):
            assert getattr(clone, attr) == getattr(g, attr), attr
        assert clone.successor("check", False) == "nap" and clone.classify("left", {"gpu"}) is None


def test_compiled_graph_has_no_plan(impl: Impl) -> None:
    # plan() was only ever used by tests (issue #10): gone from both twins.
    assert not hasattr(impl.traversal.CompiledGraph, "plan")
    assert not hasattr(impl.traversal, "successor") and not hasattr(impl.traversal, "classify")


# a graph built through the DSL ------------------------------------------------------------------


def _h(name: str) -> Callable[[Any], Any]:
    def handler(ctx: Any) -> Any:
        return ctx

    handler.__name__ = name
    return handler


# One of everything: tasks, a gate, a choose, a loop, other queues, sleep, fork/join, user task.
TRAV = (
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
def trav(impl: Impl) -> Any:
    return impl.traversal.CompiledGraph(TRAV)


def test_dsl_successor_of_tasks_ignores_the_predicate_value(trav: Any) -> None:
    assert trav.successor("a") == "g"
    assert trav.successor("a", True) == "g"
    assert trav.successor("a", False) == "g"
    assert trav.successor("pay", False) == "c"
    assert trav.successor("z") == "end"


def test_dsl_successor_of_a_gate(trav: Any) -> None:
    assert trav.successor("g", True) == "pay"
    assert trav.successor("g", False) == "gated.g"


def test_dsl_successor_of_a_choose(trav: Any) -> None:
    assert trav.successor("c", True) == "yes"
    assert trav.successor("c", False) == "no"
    assert trav.successor("yes") == trav.successor("no") == "more"


def test_dsl_successor_of_a_loop(trav: Any) -> None:
    assert trav.successor("more", True) == "body"
    assert trav.successor("body") == "more"
    assert trav.successor("more", False) == "nap"


def test_dsl_successor_of_fork_branch_steps_is_the_join(trav: Any) -> None:
    assert trav.successor("left") == "join"
    assert trav.successor("right") == "join"


def test_dsl_successor_agrees_with_the_definition(trav: Any) -> None:
    for node in TRAV.nodes:
        if node.is_worker_step:
            assert trav.successor(node.id, True) == node.next
            expected_false = node.alt_next if node.kind is NodeKind.PREDICATE else node.next
            assert trav.successor(node.id, False) == expected_false


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
def test_dsl_classify(trav: Any, node_id: str, expected: Handback | None) -> None:
    assert trav.classify(node_id, {"trav"}) is expected


def test_dsl_classify_other_queue_served_runs_locally(trav: Any) -> None:
    assert trav.classify("pay", {"trav", "payments"}) is None
    assert trav.classify("pay", frozenset({"payments"})) is None
    assert trav.classify("pay", ["payments"]) is None
    assert trav.classify("a", {"payments"}) is Handback.OTHER_QUEUE
    assert trav.classify("a", set()) is Handback.OTHER_QUEUE


def test_dsl_classify_boundaries_do_not_depend_on_queues(trav: Any) -> None:
    for queues in (set(), {"trav"}, {"trav", "payments"}):
        assert trav.classify("nap", queues) is Handback.SLEEP
        assert trav.classify("fork", queues) is Handback.FORK
        assert trav.classify("join", queues) is Handback.JOIN
        assert trav.classify("approval", queues) is Handback.USER_TASK
        assert trav.classify("end", queues) is Handback.TERMINAL


def test_dsl_is_checkpoint(trav: Any) -> None:
    for node in TRAV.nodes:
        assert trav.is_checkpoint(node.id) is (node.id == "pay")


def test_default_queue_is_the_workflow_name(impl: Impl) -> None:
    definition = WorkflowDefinition(
        name="named",
        start_node="a",
        nodes=(
            Node(id="a", kind=NodeKind.TASK, next="b"),
            Node(id="b", kind=NodeKind.TASK, next="end", queue="named"),
            Node(id="end", kind=NodeKind.END),
        ),
    ).validate()
    graph = impl.traversal.CompiledGraph(definition)
    assert graph.classify("a", {"named"}) is None
    assert graph.classify("b", {"named"}) is None
    assert graph.classify("a", {"default"}) is Handback.OTHER_QUEUE


def test_checkpoints_built_through_the_dsl(impl: Impl) -> None:
    wf = Workflow.define("lin").step(_h("s1")).step(_h("s2")).checkpoint().step(_h("s3"))
    graph = impl.traversal.CompiledGraph(wf.build().definition)
    assert graph.is_checkpoint("s2") and not graph.is_checkpoint("s1") and not graph.is_checkpoint("s3")


# SIGNAL (issue #11): a server-side wait, so a handback boundary in both twins ---------------------

SIGNAL_DEMO = WorkflowDefinition(
    name="orders",
    start_node="fetch",
    nodes=(
        Node(id="fetch", kind=NodeKind.TASK, next="wait"),
        Node(id="wait", kind=NodeKind.SIGNAL, signal="paid", next="ship", alt_next="late", timeout_millis=5),
        Node(id="ship", kind=NodeKind.TASK, next="done"),
        Node(id="late", kind=NodeKind.END, success=False),
        Node(id="done", kind=NodeKind.END),
    ),
).validate()


def test_signal_kind_code_and_handback(impl: Impl) -> None:
    t = impl.traversal
    assert t.SIGNAL == 7
    g = t.CompiledGraph(SIGNAL_DEMO)
    assert g.kinds[1] == 7
    assert g.classify("wait", {"orders"}) is Handback.SIGNAL
    assert g.successor("wait") == "ship"
    assert g.successor("fetch") == "wait"
    restored = pickle.loads(pickle.dumps(g))
    assert restored.classify("wait", {"orders"}) is Handback.SIGNAL


# SUB_WORKFLOW and FOR_EACH (issue #11): server-side nodes, so a local run hands back there -------

NESTING = (
    Workflow.define("nesting")
    .step(lambda ctx: ctx, name="prep")
    .sub_workflow("call", "child", result_key="out")
    .for_each("xs", lambda b: b.step(lambda ctx: ctx, name="body"), concurrency=3)
    .build()
    .definition
)


def test_new_kind_codes(impl: Impl) -> None:
    t = impl.traversal
    assert (t.SUB_WORKFLOW, t.FOR_EACH) == (8, 9)
    g = t.CompiledGraph(NESTING)
    assert g.kinds[g.index["call"]] == 8 and g.kinds[g.index["for_each"]] == 9


def test_sub_workflow_and_for_each_are_handback_boundaries(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(NESTING)
    queues = {"nesting"}
    assert g.classify("prep", queues) is None
    assert g.successor("prep") == "call"
    assert g.classify("call", queues) is Handback.SUB_WORKFLOW
    assert g.classify("for_each", queues) is Handback.FOR_EACH
    assert g.classify("body", queues) is None
    assert g.successor("body") == "for_each.join"
    assert g.classify("for_each.join", queues) is Handback.JOIN


def test_new_kinds_survive_pickling(impl: Impl) -> None:
    g = impl.traversal.CompiledGraph(NESTING)
    back = pickle.loads(pickle.dumps(g))
    assert back.kinds == g.kinds
    assert back.classify("call", {"nesting"}) is Handback.SUB_WORKFLOW
