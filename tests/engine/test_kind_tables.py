"""Every per-kind table covers every node kind, so a kind added to NodeKind and forgotten in one
concern fails here instead of at run time (issue #24: a for_each retry once failed the instance with
``KeyError: 'item'`` because one if/elif chain missed FOR_EACH).

The tables: validation (``_model_validate.NODE_CHECKS``), driving (``_engine.drive.DRIVERS``),
resume rules (``_engine.resume.RETRY_RULES``), upstream translation (``_upstream.kinds.KINDS``),
``wiggle describe``'s edges (``_cli.ops.EDGES``), the compiler's item rules
(``_workflow_compile.ITEM_RULES``, keyed by item class and naming the kinds each makes), and the
traversal's kind codes and handbacks (``_fast`` CompiledGraph, whichever twin is selected).
"""

from __future__ import annotations

from typing import Any

import pytest

from wiggle import _fast
from wiggle import _workflow_items as items
from wiggle._cli.ops import EDGES
from wiggle._engine.drive import DRIVERS
from wiggle._engine.resume import RETRY_RULES, enclosing
from wiggle._model import Handback, Node, NodeKind, WorkflowDefinition
from wiggle._model_validate import NODE_CHECKS
from wiggle._upstream.definitions import SUPPORTED_KINDS, to_upstream
from wiggle._upstream.kinds import BY_UPSTREAM_NAME, KINDS
from wiggle._workflow_compile import ITEM_RULES, Compiler
from wiggle._workflow_items import Item
from wiggle.errors import InvalidArgument

TABLES: dict[str, dict[NodeKind, Any]] = {
    "validation (_model_validate.NODE_CHECKS)": NODE_CHECKS,
    "driving (_engine/drive.DRIVERS)": DRIVERS,
    "resume rules (_engine/resume.RETRY_RULES)": RETRY_RULES,
    "upstream translation (_upstream/kinds.KINDS)": KINDS,
    "describe edges (_cli/ops.EDGES)": EDGES,
}


@pytest.mark.parametrize("table", TABLES.values(), ids=TABLES.keys())
def test_every_node_kind_has_a_row(table: dict[NodeKind, Any]) -> None:
    assert set(table) == set(NodeKind)


# ---------------------------------------------------------------------------- compilation


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _subclasses(sub)
    return found


def _step(name: str) -> items.StepItem:
    return items.StepItem(lambda ctx: ctx, name, None, None)


#: One item of each class, with empty branches (the compiler below reads a branch as a list).
SAMPLES: list[Item] = [
    _step("s"),
    items.GateItem(lambda ctx: True, "g", None, None),
    items.ChooseItem(_step("c"), [], []),  # type: ignore[arg-type]
    items.LoopItem(_step("l"), []),  # type: ignore[arg-type]
    items.SleepItem("z", 1000),
    items.ForkItem("fork", [[], []]),  # type: ignore[list-item]
    items.ForEachItem("each", "each.join", "xs", [], {}),  # type: ignore[arg-type]
    items.SubWorkflowItem("kid", {"workflow": "child"}, None),
    items.UserTaskItem("approve", 0, None),
    items.SignalItem("wait", "go", 0, None, None),
    items.EndItem("end", None, True),
]


def test_every_item_class_has_a_rule_and_every_kind_is_made_by_one() -> None:
    assert set(ITEM_RULES) == _subclasses(Item)
    assert {type(item) for item in SAMPLES} == set(ITEM_RULES)  # a new item class needs a sample here
    made = set().union(*(rule.kinds for rule in ITEM_RULES.values()))
    assert made == set(NodeKind)


@pytest.mark.parametrize("item", SAMPLES, ids=lambda item: type(item).__name__)
def test_each_item_makes_the_kinds_its_rule_names(item: Item) -> None:
    compiler = Compiler("kinds", lambda branch: branch)  # type: ignore[arg-type,return-value]
    first = compiler.item(item, "after")
    assert first in {n.id for n in compiler.nodes}
    assert {n.kind for n in compiler.nodes} == ITEM_RULES[type(item)].kinds


# ---------------------------------------------------------------------------- each row does its job


@pytest.mark.parametrize("kind", list(NodeKind), ids=lambda k: k.value)
def test_each_kind_check_refuses_a_bare_node_with_a_dangling_edge(kind: NodeKind) -> None:
    """A node of the kind with nothing but an edge to nowhere is refused by its own check, naming it
    (a check that does nothing would let the graph walk fail with a KeyError instead)."""
    definition = WorkflowDefinition(
        name="kinds",
        start_node="x",
        nodes=(Node(id="x", kind=kind, next="nowhere"), Node(id="end", kind=NodeKind.END)),
    )
    with pytest.raises(InvalidArgument) as err:
        definition.validate()
    assert "'x'" in str(err.value)


def test_upstream_names_are_unique_and_the_readable_ones_are_the_supported_kinds() -> None:
    names = [row.name for row in KINDS.values()]
    assert len(set(names)) == len(names)
    assert set(SUPPORTED_KINDS) == set(BY_UPSTREAM_NAME)
    assert {kind for kind, row in KINDS.items() if row.incoming is None} == {NodeKind.USER_TASK}
    assert KINDS[NodeKind.FOR_EACH].name == "DYN_FORK"


@pytest.mark.parametrize("kind", list(NodeKind), ids=lambda k: k.value)
def test_each_kind_is_written_in_upstream_shape(kind: NodeKind) -> None:
    """Every kind's writer renders a bare node of its kind (GetWorkflow answers for any definition)."""
    definition = WorkflowDefinition(name="kinds", start_node="x", nodes=(Node(id="x", kind=kind),))
    (out,) = to_upstream(definition, 1)["nodes"]
    assert out["id"] == "x" and out["kind"] == KINDS[kind].name


def test_the_resume_rules_refuse_ends_and_joins_and_know_what_forks_open() -> None:
    refused = {kind for kind, rule in RETRY_RULES.items() if rule.refused}
    assert refused == {NodeKind.END, NodeKind.JOIN}
    opening = {kind for kind, rule in RETRY_RULES.items() if rule.opens}
    assert opening == {NodeKind.FORK, NodeKind.FOR_EACH}
    definition = WorkflowDefinition(
        name="kinds",
        start_node="fork",
        nodes=(
            Node(id="fork", kind=NodeKind.FORK, branches=("each",), join="join"),
            Node(id="each", kind=NodeKind.FOR_EACH, items_key="xs", branches=("body",), join="each.join"),
            Node(id="body", kind=NodeKind.TASK, next="each.join"),
            Node(id="each.join", kind=NodeKind.JOIN, fork="each", next="join"),
            Node(id="join", kind=NodeKind.JOIN, fork="fork", next="end"),
            Node(id="end", kind=NodeKind.END),
        ),
    ).validate()
    assert enclosing(definition) == {
        "each": "a fork branch",
        "each.join": "a fork branch",
        "body": "a for_each body",
    }


def test_the_traversal_knows_every_kind() -> None:
    """The selected CompiledGraph twin (its kind codes and boundary handbacks, wiggle/_fast/traversal_*):
    a worker step runs locally on its queue, every other kind is a boundary with its own handback."""
    nodes = tuple(Node(id=kind.value.lower(), kind=kind) for kind in NodeKind)
    graph = _fast.CompiledGraph(WorkflowDefinition(name="kinds", start_node="task", nodes=nodes))
    handbacks = {kind: graph.classify(kind.value.lower(), ["kinds"]) for kind in NodeKind}
    assert handbacks[NodeKind.TASK] is None and handbacks[NodeKind.PREDICATE] is None
    boundaries = [h for kind, h in handbacks.items() if kind not in (NodeKind.TASK, NodeKind.PREDICATE)]
    assert all(isinstance(h, Handback) for h in boundaries)
    assert len(set(boundaries)) == len(boundaries)  # each boundary kind says which it is
