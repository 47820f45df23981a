"""Upstream definitions to ours and back (wiggle/_upstream/definitions.py, docs/upstream.md).

The golden files are what PyPI ``wiggle-client`` 0.1.1 sends to RegisterWorkflow, written by
scripts/gen_upstream_golden.py; these tests read the files and never import that package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from wiggle._limits import MAX_DURATION_MILLIS
from wiggle._model import ExecutionMode, JoinMerge, Node, NodeKind, RetryPolicy, WorkflowDefinition
from wiggle._upstream.definitions import (
    UPSTREAM_DEFAULT_RETRY,
    from_upstream,
    to_upstream,
)
from wiggle._upstream.values import struct_to_dict

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def golden(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))


def nodes_of(name: str) -> dict[str, Node]:
    return from_upstream(golden(name)).definition.node_map()


def edges(definition: WorkflowDefinition) -> set[tuple[str, str, str]]:
    out = set()
    for n in definition.nodes:
        for field in ("next", "alt_next", "join", "fork"):
            target = getattr(n, field)
            if target is not None:
                out.add((n.id, field, target))
        for i, b in enumerate(n.branches):
            out.add((n.id, f"branches[{i}]", b))
    return out


# ---------------------------------------------------------------------------- every golden


def test_the_goldens_are_there() -> None:
    expected = {
        "quickstart",
        "fork_gate",
        "nested_fork",
        "choose_otherwise",
        "choose_no_otherwise",
        "do_while",
        "fork_each",
        "sub_workflow_parent",
        "sub_workflow_child",
        "signal_timeout",
        "signal_escalation",
        "explicit_version",
        "retries",
        "id_clash",
        "empty",
    }
    assert expected <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_translates_and_validates(name: str) -> None:
    doc = golden(name)
    result = from_upstream(doc)
    d = result.definition
    assert d.validate() is d
    assert result.version == doc["version"]
    assert d.name == doc["name"]
    assert d.join_merge is JoinMerge.LAST_WRITE_WINS
    assert d.execution_mode is ExecutionMode.SERVER
    assert len(d.nodes) == len(doc["nodes"])
    ours = d.node_map()
    for raw in doc["nodes"]:
        if raw["kind"] in ("TASK", "PREDICATE"):
            # a step's id is its name, so its activity is "<workflow>#<our id>"
            node = ours[raw["name"]]
            assert node.kind.value == raw["kind"]
            assert raw["activity"] == f"{d.name}#{node.id}"
            assert node.queue == raw["queue"]


@pytest.mark.parametrize("name", NAMES)
def test_the_wire_form_translates_the_same(name: str) -> None:
    """The client sends a Struct (every number a double); both readings of it translate alike."""
    doc = golden(name)
    struct = json_format.ParseDict(doc, struct_pb2.Struct())
    assert from_upstream(struct_to_dict(struct)) == from_upstream(doc)
    as_doubles = json_format.MessageToDict(struct)  # 1000 -> 1000.0 and so on
    assert from_upstream(as_doubles) == from_upstream(doc)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_through_upstream_is_exact(name: str) -> None:
    result = from_upstream(golden(name))
    assert result.version is not None
    out = to_upstream(result.definition, result.version)
    assert from_upstream(out) == result
    assert from_upstream(json.loads(json.dumps(out))) == result


@pytest.mark.parametrize("name", NAMES)
def test_to_upstream_keeps_what_upstream_workers_read(name: str) -> None:
    """An upstream worker reads each node's kind, activity and queue (worker.py _reconcile)."""
    doc = golden(name)
    out = to_upstream(from_upstream(doc).definition, doc["version"])
    assert out["name"] == doc["name"] and out["version"] == doc["version"]
    assert out["queues"] == doc["queues"] and out["executionMode"] == "SERVER"

    def steps(d: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {
            (n["kind"], n["activity"], n["queue"]) for n in d["nodes"] if n["kind"] in ("TASK", "PREDICATE")
        }

    assert steps(out) == steps(doc)
    for n in out["nodes"]:
        if n["kind"] in ("TASK", "PREDICATE"):
            assert n["activity"] == f"{out['name']}#{n['name']}" and n["name"] == n["id"]


# ---------------------------------------------------------------------------- shapes, one by one


def test_quickstart() -> None:
    nodes = nodes_of("quickstart")
    assert [(n.id, n.kind) for n in from_upstream(golden("quickstart")).definition.nodes] == [
        ("validate", NodeKind.TASK),
        ("in-stock", NodeKind.PREDICATE),
        ("end3", NodeKind.END),
        ("charge", NodeKind.TASK),
        ("n5", NodeKind.SLEEP),
        ("notify", NodeKind.TASK),
        ("end7", NodeKind.END),
    ]
    d = from_upstream(golden("quickstart")).definition
    assert d.start_node == "validate"
    assert edges(d) == {
        ("validate", "next", "in-stock"),
        ("in-stock", "next", "charge"),
        ("in-stock", "alt_next", "end3"),
        ("charge", "next", "n5"),
        ("n5", "next", "notify"),
        ("notify", "next", "end7"),
    }
    assert nodes["end3"].success and nodes["end3"].reason == "gated:in-stock"
    assert nodes["end7"].success and nodes["end7"].reason is None
    assert nodes["n5"].sleep_millis == 1000
    assert nodes["charge"].queue == "payments"
    assert nodes["charge"].retry == RetryPolicy(5, 100, 2.0, 300_000, 0.2)
    assert nodes["validate"].retry == UPSTREAM_DEFAULT_RETRY
    assert UPSTREAM_DEFAULT_RETRY == RetryPolicy(0, 1000, 1.0, 60_000, 0.0)


def test_fork_with_a_gate_in_a_branch() -> None:
    d = from_upstream(golden("fork_gate")).definition
    assert edges(d) == {
        ("validate", "next", "fork2"),
        ("fork2", "branches[0]", "charge"),
        ("fork2", "branches[1]", "deliverable"),
        ("fork2", "join", "join3"),
        ("join3", "fork", "fork2"),
        ("join3", "next", "notify"),
        ("charge", "next", "join3"),
        ("deliverable", "next", "label"),
        ("deliverable", "alt_next", "join3"),  # a false gate short-circuits to the join
        ("label", "next", "join3"),
        ("notify", "next", "end8"),
    }


def test_nested_fork_pairs_each_fork_with_its_own_join() -> None:
    nodes = nodes_of("nested_fork")
    assert nodes["fork1"].branches == ("fork3", "ob") and nodes["fork1"].join == "join2"
    assert nodes["fork3"].branches == ("ia", "ib", "ic") and nodes["fork3"].join == "join4"
    assert nodes["join2"].fork == "fork1" and nodes["join4"].fork == "fork3"
    assert nodes["join4"].next == "after-inner" and nodes["after-inner"].next == "join2"


def test_choose_with_and_without_otherwise() -> None:
    nodes = nodes_of("choose_otherwise")
    assert (nodes["vip"].next, nodes["vip"].alt_next) == ("concierge", "regular")
    assert (nodes["regular"].next, nodes["regular"].alt_next) == ("standard", "thanks")
    assert {nodes[s].next for s in ("concierge", "standard", "thanks")} == {"notify"}
    plain = nodes_of("choose_no_otherwise")
    assert (plain["vip"].next, plain["vip"].alt_next) == ("concierge", "notify")


def test_do_while_is_a_cycle() -> None:
    nodes = nodes_of("do_while")
    assert nodes["init"].next == "work" and nodes["count"].next == "more"
    assert (nodes["more"].kind, nodes["more"].next, nodes["more"].alt_next) == (
        NodeKind.PREDICATE,
        "work",
        "finish",
    )


def test_fork_each_becomes_for_each() -> None:
    nodes = nodes_of("fork_each")
    fe = nodes["dynfork1"]
    assert fe.kind is NodeKind.FOR_EACH
    assert (fe.items_key, fe.item_key, fe.index_key) == ("items", "item", "itemIndex")
    assert fe.branches == ("price",) and fe.join == "join2" and fe.next is None
    assert fe.output_key is None and fe.result_key is None and fe.concurrency == 0
    assert nodes["join2"].fork == "dynfork1" and nodes["join2"].next == "summarise"
    assert nodes["price"].next == "join2"


def test_sub_workflow_has_no_retry_and_no_error_path() -> None:
    nodes = nodes_of("sub_workflow_parent")
    sub = nodes["sub2"]
    assert sub.kind is NodeKind.SUB_WORKFLOW and sub.workflow == "child"
    assert sub.retry == RetryPolicy.none() and sub.alt_next is None and sub.next == "after"
    assert sub.version is None and sub.input_keys is None and sub.result_key is None
    assert nodes_of("sub_workflow_child")["child-step"].next == "end2"


def test_signal_waits() -> None:
    nodes = nodes_of("signal_timeout")
    assert (nodes["n1"].signal, nodes["n1"].timeout_millis, nodes["n1"].alt_next) == ("approved", 0, None)
    assert (nodes["n2"].signal, nodes["n2"].timeout_millis, nodes["n2"].alt_next) == ("shipped", 30_000, None)
    assert nodes["n1"].result_key is None  # the payload merges into the context
    esc = nodes_of("signal_escalation")
    assert (esc["n1"].signal, esc["n1"].timeout_millis) == ("approved", 3_600_000)
    assert (esc["n1"].next, esc["n1"].alt_next) == ("close", "escalate")
    assert esc["escalate"].next == "close"


def test_explicit_version() -> None:
    assert from_upstream(golden("explicit_version")).version == 7


def test_retry_policies() -> None:
    nodes = nodes_of("retries")
    assert nodes["none"].retry == RetryPolicy(1, 0, 1.0, 0, 0.0)
    assert nodes["fixed"].retry == RetryPolicy(4, 2500, 1.0, 2500, 0.0)
    assert nodes["forever"].retry == UPSTREAM_DEFAULT_RETRY
    assert nodes["default"].retry == UPSTREAM_DEFAULT_RETRY
    assert nodes["checked"].retry == RetryPolicy(3, 500, 2.0, 300_000, 0.2)
    assert nodes["checked"].queue == "gates"
    assert {nodes[s].queue for s in ("none", "fixed", "forever", "default")} == {"work"}


def test_ids_that_collide_with_step_names_are_made_unique() -> None:
    d = from_upstream(golden("id_clash")).definition
    assert [(n.id, n.kind) for n in d.nodes] == [
        ("n2", NodeKind.TASK),
        ("n2_1", NodeKind.SLEEP),
        ("end4", NodeKind.TASK),
        ("end4_1", NodeKind.END),
    ]
    assert edges(d) == {("n2", "next", "n2_1"), ("n2_1", "next", "end4"), ("end4", "next", "end4_1")}


def test_collision_suffix_skips_ids_already_taken() -> None:
    doc = golden("id_clash")
    doc["nodes"][2]["name"] = "n2_1"  # the step "end4" is now "n2_1": the sleep "n2" needs "n2_2"
    doc["nodes"][2]["activity"] = "clash#n2_1"
    assert [n.id for n in from_upstream(doc).definition.nodes] == ["n2", "n2_2", "n2_1", "end4"]


def test_empty_workflow() -> None:
    d = from_upstream(golden("empty")).definition
    assert d.start_node == "end1" and d.nodes == (Node(id="end1", kind=NodeKind.END),)


# ---------------------------------------------------------------------------- fields and defaults


def quick() -> dict[str, Any]:
    return golden("quickstart")


def node(doc: dict[str, Any], uid: str) -> dict[str, Any]:
    return next(n for n in doc["nodes"] if n["id"] == uid)


def test_a_step_without_retry_retries_forever() -> None:
    doc = quick()
    del node(doc, "n4")["retry"]
    assert from_upstream(doc).definition.node_map()["charge"].retry == UPSTREAM_DEFAULT_RETRY


def test_retry_fields_default_as_upstream_reads_them() -> None:
    doc = quick()
    node(doc, "n4")["retry"] = {"maxAttempts": 3}
    assert from_upstream(doc).definition.node_map()["charge"].retry == RetryPolicy(3, 0, 1.0, 0, 0.0)
    node(doc, "n4")["retry"] = {"maxAttempts": 3, "initialBackoffMillis": 50}  # a cap of 0 is no cap
    assert from_upstream(doc).definition.node_map()["charge"].retry == RetryPolicy(
        3, 50, 1.0, MAX_DURATION_MILLIS, 0.0
    )
    node(doc, "n4")["retry"] = {"maxAttempts": 2147483647, "multiplier": 3}
    assert from_upstream(doc).definition.node_map()["charge"].retry == RetryPolicy(0, 0, 3.0, 0, 0.0)


@pytest.mark.parametrize("mode", ["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC", "DEFAULT"])
def test_execution_modes(mode: str) -> None:
    doc = quick()
    doc["executionMode"] = mode
    d = from_upstream(doc).definition
    assert d.execution_mode is ExecutionMode(mode)
    assert to_upstream(d, 1)["executionMode"] == mode


def test_missing_optional_fields() -> None:
    doc = quick()
    for key in ("version", "executionMode", "queues"):
        del doc[key]
    result = from_upstream(doc)
    assert result.version is None and result.definition.execution_mode is ExecutionMode.DEFAULT
    del node(doc, "end7")["success"]  # upstream reads a missing success as false
    assert from_upstream(doc).definition.node_map()["end7"].success is False


def test_checkpoints_are_renamed_and_sorted() -> None:
    doc = quick()
    doc["checkpoints"] = ["n6", "n1", "n6"]
    d = from_upstream(doc).definition
    assert d.checkpoints == ("notify", "validate")
    assert to_upstream(d, 3)["checkpoints"] == ["notify", "validate"]


def test_null_reads_as_absent() -> None:
    doc = quick()
    doc["checkpoints"] = None
    node(doc, "n1")["altNext"] = None
    node(doc, "n4")["retry"] = None
    d = from_upstream(doc).definition
    assert d.checkpoints == () and d.node_map()["charge"].retry == UPSTREAM_DEFAULT_RETRY


def test_a_loop_budget_of_minus_one_is_the_default() -> None:
    doc = quick()
    node(doc, "n2")["loopBudget"] = -1
    node(doc, "n1")["compensable"] = False
    assert from_upstream(doc) == from_upstream(quick())
