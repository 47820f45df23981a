"""Our own definitions in upstream's shape (GetWorkflow), and back (wiggle/_upstream/definitions.py)."""

from __future__ import annotations

from typing import Any

from wiggle._model import (
    ExecutionMode,
    JoinMerge,
    Node,
    NodeKind,
    RetryPolicy,
    WorkflowDefinition,
)
from wiggle._upstream.definitions import UPSTREAM_MAX_ATTEMPTS, from_upstream, to_upstream

K = NodeKind


def ours() -> WorkflowDefinition:
    """Every kind upstream can express, with the fields ours has and upstream has not."""
    return WorkflowDefinition(
        name="mixed",
        start_node="a",
        default_retry=RetryPolicy(max_attempts=4, initial_backoff_millis=10, max_backoff_millis=40),
        execution_mode=ExecutionMode.LOCAL_SYNC,
        checkpoints=("b", "a"),
        nodes=(
            Node(id="a", kind=K.TASK, next="ok"),  # no queue, no retry: the workflow's default
            Node(
                id="ok",
                kind=K.PREDICATE,
                next="nap",
                alt_next="failed",
                queue="q2",
                retry=RetryPolicy.forever(),
            ),
            Node(id="failed", kind=K.END, success=False, reason="not ok"),
            Node(id="nap", kind=K.SLEEP, sleep_millis=250, next="f"),
            Node(id="f", kind=K.FORK, branches=("b", "wait"), join="j"),
            Node(id="b", kind=K.TASK, next="j"),
            Node(
                id="wait",
                kind=K.SIGNAL,
                signal="go",
                timeout_millis=5000,
                alt_next="j",
                result_key="go",
                next="j",
            ),
            Node(id="j", kind=K.JOIN, fork="f", next="each"),
            Node(
                id="each",
                kind=K.FOR_EACH,
                items_key="xs",
                item_key="x",
                index_key="i",
                output_key="y",
                result_key="ys",
                concurrency=3,
                branches=("body",),
                join="ej",
            ),
            Node(id="body", kind=K.TASK, next="ej", queue="q3"),
            Node(id="ej", kind=K.JOIN, fork="each", next="child"),
            Node(id="child", kind=K.SUB_WORKFLOW, workflow="other", version="v1", result_key="r", next="end"),
            Node(id="end", kind=K.END),
        ),
    )


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in doc["nodes"]}


def test_every_kind_in_upstream_shape() -> None:
    doc = to_upstream(ours(), 42)
    assert {k: v for k, v in doc.items() if k != "nodes"} == {
        "name": "mixed",
        "version": 42,
        "startNode": "a",
        "queues": ["mixed", "q2", "q3"],
        "executionMode": "LOCAL_SYNC",
        "checkpoints": ["a", "b"],
    }
    n = by_id(doc)
    assert n["a"] == {
        "id": "a",
        "kind": "TASK",
        "name": "a",
        "activity": "mixed#a",
        "queue": "mixed",
        "retry": {
            "maxAttempts": 4,
            "initialBackoffMillis": 10,
            "multiplier": 2.0,
            "maxBackoffMillis": 40,
            "jitter": 0.0,
        },
        "next": "ok",
    }
    assert n["ok"]["retry"]["maxAttempts"] == UPSTREAM_MAX_ATTEMPTS
    assert (n["ok"]["next"], n["ok"]["altNext"], n["ok"]["queue"]) == ("nap", "failed", "q2")
    assert n["failed"] == {"id": "failed", "kind": "END", "success": False, "reason": "not ok"}
    assert n["end"] == {"id": "end", "kind": "END", "success": True}
    assert n["nap"] == {"id": "nap", "kind": "SLEEP", "name": "nap", "sleepMillis": 250, "next": "f"}
    assert n["f"] == {"id": "f", "kind": "FORK", "name": "f", "branches": ["b", "wait"]}
    assert n["j"] == {"id": "j", "kind": "JOIN", "name": "j", "next": "each", "expected": 2}
    assert n["wait"] == {
        "id": "wait",
        "kind": "SIGNAL",
        "name": "go",
        "sleepMillis": 5000,
        "next": "j",
        "altNext": "j",
    }
    assert n["each"] == {
        "id": "each",
        "kind": "DYN_FORK",
        "name": "each",
        "next": "ej",
        "branches": ["body"],
        "itemsKey": "xs",
        "itemKey": "x",
    }
    assert n["ej"] == {"id": "ej", "kind": "JOIN", "name": "ej", "next": "child"}  # no width: dynamic
    assert n["child"] == {
        "id": "child",
        "kind": "SUB_WORKFLOW",
        "name": "child",
        "activity": "other",
        "next": "end",
    }


def test_user_tasks_and_combine_joins_keep_their_kind() -> None:
    d = WorkflowDefinition(
        name="people",
        start_node="f",
        nodes=(
            Node(id="f", kind=K.FORK, branches=("approve", "t"), join="j"),
            Node(id="approve", kind=K.USER_TASK, timeout_millis=60_000, alt_next="j", next="j"),
            Node(id="t", kind=K.TASK, next="j"),
            Node(id="j", kind=K.JOIN, fork="f", combine=True, queue="merge", next="end"),
            Node(id="end", kind=K.END),
        ),
    ).validate()
    n = by_id(to_upstream(d, 1))
    assert n["approve"] == {
        "id": "approve",
        "kind": "USER_TASK",
        "name": "approve",
        "sleepMillis": 60_000,
        "next": "j",
        "altNext": "j",
    }
    assert n["j"] == {"id": "j", "kind": "JOIN", "name": "j", "next": "end", "expected": 2}
    assert n["t"]["retry"]["maxAttempts"] == 3  # DEFAULT_RETRY, the policy in force


def test_a_zero_cap_means_no_wait_both_ways() -> None:
    """Ours: a cap of 0 makes every backoff 0. Upstream: a cap of 0 is no cap. So the wait goes."""
    d = WorkflowDefinition(
        name="w",
        start_node="a",
        nodes=(
            Node(id="a", kind=K.TASK, next="e", retry=RetryPolicy(5, 100, 2.0, 0, 0.0)),
            Node(id="e", kind=K.END),
        ),
    )
    out = to_upstream(d, 1)
    assert by_id(out)["a"]["retry"]["initialBackoffMillis"] == 0
    back = from_upstream(out).definition.node_map()["a"].retry
    assert back is not None and [back.backoff_millis(i) for i in range(1, 5)] == [0, 0, 0, 0]


def shape(d: WorkflowDefinition) -> dict[str, Any]:
    """What upstream can carry: ids, kinds, edges, timers, keys, queues and retries in force."""
    nodes = {}
    for n in d.nodes:
        nodes[n.id] = (
            n.kind,
            n.next,
            n.alt_next,
            n.branches,
            n.join,
            n.fork,
            n.sleep_millis,
            n.timeout_millis,
            n.signal,
            n.workflow,
            n.items_key,
            n.item_key or ("item" if n.kind is K.FOR_EACH else None),
            n.success,
            n.reason,
            (n.queue or d.name) if n.is_worker_step else None,
            d.retry_for(n) if n.is_worker_step else None,
        )
    return {"start": d.start_node, "mode": d.execution_mode, "cp": sorted(d.checkpoints), "nodes": nodes}


def test_round_trip_of_our_definition_keeps_its_graph() -> None:
    d = ours().validate()
    back = from_upstream(to_upstream(d, 9))
    assert back.version == 9
    assert shape(back.definition) == shape(d)
    assert back.definition.join_merge is JoinMerge.LAST_WRITE_WINS
    # what upstream has no place for takes upstream's rules on the way back
    nodes = back.definition.node_map()
    assert nodes["each"].index_key == "xIndex" and nodes["each"].result_key is None
    assert nodes["wait"].result_key is None
    assert nodes["child"].retry == RetryPolicy.none() and nodes["child"].version is None
