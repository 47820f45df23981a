"""The SIGNAL node in the model and the DSL: validation names the node and the field (issue #11)."""

from __future__ import annotations

import pytest

from wiggle import InvalidArgument, NodeKind, Workflow
from wiggle._model import Node, WorkflowDefinition


def _definition(wait: Node) -> WorkflowDefinition:
    return WorkflowDefinition(
        name="orders",
        start_node="wait",
        nodes=(wait, Node(id="done", kind=NodeKind.END), Node(id="late", kind=NodeKind.END, success=False)),
    )


def test_signal_node_compiles_from_the_dsl() -> None:
    bp = (
        Workflow.define("orders")
        .wait_signal(
            "paid",
            name="wait-paid",
            timeout=2,
            on_timeout=lambda b: b.end("late", success=False),
            key="payment",
        )
        .build()
    )
    node = bp.definition.node_map()["wait-paid"]
    assert (node.kind, node.signal, node.timeout_millis, node.result_key) == (
        NodeKind.SIGNAL,
        "paid",
        2000,
        "payment",
    )
    assert node.alt_next is not None and node.next == "end"
    # the node id defaults to the signal name, made unique
    two = Workflow.define("twice").wait_signal("go").wait_signal("go").build()
    assert {n.id for n in two.definition.nodes if n.kind is NodeKind.SIGNAL} == {"go", "go.2"}


def test_signal_node_without_a_signal_name_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="signal node 'wait' names no signal"):
        _definition(Node(id="wait", kind=NodeKind.SIGNAL, next="done")).validate()


def test_signal_node_bad_fields_are_named() -> None:
    with pytest.raises(InvalidArgument, match="signal node 'wait' result_key"):
        _definition(
            Node(id="wait", kind=NodeKind.SIGNAL, signal="paid", result_key="bad key", next="done")
        ).validate()
    with pytest.raises(InvalidArgument, match="signal node 'wait': timeout_millis must be >= 0"):
        _definition(
            Node(id="wait", kind=NodeKind.SIGNAL, signal="paid", timeout_millis=-1, next="done")
        ).validate()
    with pytest.raises(InvalidArgument, match="node 'wait' \\(SIGNAL\\) needs a 'next' edge"):
        _definition(Node(id="wait", kind=NodeKind.SIGNAL, signal="paid")).validate()


def test_dsl_refuses_bad_signal_names() -> None:
    with pytest.raises(InvalidArgument, match="signal name"):
        Workflow.define("orders").wait_signal("has space")
    with pytest.raises(InvalidArgument, match="signal key"):
        Workflow.define("orders").wait_signal("paid", key="")
