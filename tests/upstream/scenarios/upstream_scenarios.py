"""Upstream Wiggle's own Python client (PyPI wiggle-client 0.1.1) against our server.

Run with the python of the dedicated venv that has wiggle-client installed (never ours: it
installs a top-level package also named ``wiggle``), as
``python upstream_scenarios.py HOST:PORT``. It registers workflows with upstream's DSL, serves
them with upstream's Worker, drives them with upstream's client, and prints one JSON object:
scenario -> what the client saw (status, context, termination reason, error). The assertions are
in tests/upstream/test_upstream_client.py, on our side.
"""

# ruff: noqa: I001  (`wiggle` here is upstream's package, a third-party one, not ours)
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import grpc
from wiggle import Branch, Case, PermanentError, Retry, WiggleClient, Worker, Workflow
from wiggle._proto import wiggle_pb2 as upstream_pb

TARGET = sys.argv[1]
results: dict[str, Any] = {}
attempts: dict[str, int] = {}
lock = threading.Lock()


def seen(view: Any) -> dict[str, Any]:
    return {
        "status": view.status,
        "context": view.context,
        "termination_reason": view.termination_reason,
        "error": view.error,
        "version": view.version,
    }


def charge(o: dict) -> dict:
    return {**o, "charged": o["quantity"] * 10}


def flaky(o: dict) -> dict:
    with lock:
        attempts[o["key"]] = attempts.get(o["key"], 0) + 1
        n = attempts[o["key"]]
    if n < 3:
        raise ConnectionError(f"blip {n}")
    return {**o, "flaky_attempts": n}


def always_fails(o: dict) -> dict:
    raise ValueError("card declined")


def permanent(o: dict) -> dict:
    raise PermanentError("bad request: no such customer")


order = (
    Workflow("up-order")
    .step("validate", lambda o: {**o, "status": "VALIDATED"})
    .gate("in-stock", lambda o: o["quantity"] > 0)
    .step("charge", charge, queue="up-payments", retry=Retry.exponential(5, 0.1))
    .sleep("cool-off", seconds=0.3)
    .effect("notify", lambda o: None)
    .build()
)

fork_join = (
    Workflow("up-forkjoin")
    .step("begin", lambda o: {**o, "n": 1})
    .fork(
        Branch.of("left", lambda b: b.step("left-1", lambda o: {**o, "left": o["n"] + 1, "shared": "left"})),
        Branch.of(
            "right",
            lambda b: (
                b.step("right-1", lambda o: {**o, "right": 2, "shared": "right"})
                .gate("right-ok", lambda o: o.get("go", True))
                .step("right-2", lambda o: {**o, "right2": True})
            ),
        ),
    )
    .choose(
        Case.when(
            "big",
            lambda o: o["left"] + o["right"] > 3,
            lambda b: b.step("big-1", lambda o: {**o, "size": "big"}),
        ),
        Case.otherwise("small", lambda b: b.step("small-1", lambda o: {**o, "size": "small"})),
    )
    .step("after", lambda o: {**o, "sum": o["left"] + o["right"]})
    .build()
)

loop = (
    Workflow("up-loop")
    .do_while("again", lambda o: o["i"] < 3, lambda b: b.step("inc", lambda o: {**o, "i": o["i"] + 1}))
    .build()
)

signals = (
    Workflow("up-signal")
    .step("ask", lambda o: {**o, "asked": True})
    .await_signal("approved", timeout_s=30)
    .step("ship", lambda o: {**o, "shipped_by": o["approver"]})
    .build()
)

signal_deadline = (
    Workflow("up-signal-deadline")
    .step("ask", lambda o: {**o, "asked": True})
    .await_signal("never", timeout_s=0.3)
    .build()
)

escalation = (
    Workflow("up-signal-escalation")
    .await_signal(
        "manager", timeout_s=0.3, escalation=lambda b: b.step("escalate", lambda o: {**o, "escalated": True})
    )
    .step("end", lambda o: {**o, "ended": True})
    .build()
)

child = (
    Workflow("up-child").step("child-step", lambda o: {**o, "child_saw": o["x"], "from_child": "yes"}).build()
)
parent = (
    Workflow("up-parent")
    .step("prepare", lambda o: {**o, "x": 21})
    .sub_workflow("run-child", child)
    .step("finish", lambda o: {**o, "doubled": o["child_saw"] * 2})
    .build()
)

for_each = (
    Workflow("up-foreach")
    .fork_each(
        "each",
        "items",
        "item",
        lambda b: b.step("price", lambda o: {**o, f"priced-{o['itemIndex']}": o["item"] * 10}),
    )
    .step("total", lambda o: {**o, "total": sum(v for k, v in o.items() if k.startswith("priced-"))})
    .build()
)

retries = (
    Workflow("up-retries")
    .step("flaky", flaky, retry=Retry.fixed(5, 0.05))
    .step("after", lambda o: {**o, "after": True})
    .build()
)
exhausted = Workflow("up-exhausted").step("declined", always_fails, retry=Retry.fixed(2, 0.05)).build()
permanent_wf = Workflow("up-permanent").step("lookup", permanent).build()

sleeper = (
    Workflow("up-cancel").step("first", lambda o: {**o, "first": True}).sleep("long", seconds=600).build()
)

ticker = Workflow("up-tick").step("tick", lambda o: {**o, "ticked": True}).build()

pinned = Workflow("up-pinned", version=7).step("only", lambda o: {**o, "pinned": True}).build()

BLUEPRINTS = [
    order,
    fork_join,
    loop,
    signals,
    signal_deadline,
    escalation,
    child,
    parent,
    for_each,
    retries,
    exhausted,
    permanent_wf,
    sleeper,
    ticker,
    pinned,
]


def finish(client: WiggleClient, iid: str, timeout: float = 60.0) -> dict[str, Any]:
    return seen(client.await_completion(iid, timeout_s=timeout, poll_interval_s=0.05))


def signal_when_waiting(client: WiggleClient, iid: str, name: str, payload: Any) -> int:
    """Upstream refuses a signal to an instance that is not waiting yet: retry until it waits."""
    refused = 0
    deadline = time.monotonic() + 30
    while True:
        try:
            client.signal(iid, name, payload)
            return refused
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                raise
            refused += 1
            time.sleep(0.05)


def main() -> None:
    with WiggleClient(TARGET) as client:
        results["health"] = client.health()
        worker = Worker(client, "upstream-worker", concurrency=8, long_poll_wait_s=1.0, idle_backoff_s=0.05)
        for bp in BLUEPRINTS:
            worker.register(bp)
        worker.start()  # registers every blueprint (child before parent), then polls
        try:
            results["versions"] = {bp.name: bp.version for bp in BLUEPRINTS}
            results["registered_again"] = client.register(order)
            results["cluster"] = client.cluster()
            results["workflows"] = sorted(client._stub.ListWorkflows(upstream_pb.Empty()).workflows)
            results["get_workflow_steps"] = sorted(
                n["activity"] for n in client.get_workflow("up-order")["nodes"] if "activity" in n
            )

            results["quickstart"] = finish(client, client.start(order, {"orderId": "A-1", "quantity": 3}))
            results["gated"] = finish(client, client.start(order, {"orderId": "A-2", "quantity": 0}))
            results["fork_join"] = finish(client, client.start(fork_join, {}))
            results["fork_join_gated"] = finish(client, client.start(fork_join, {"go": False}))
            results["do_while"] = finish(client, client.start(loop, {"i": 0}))

            iid = client.start(signals, {"order": 9})
            refused = signal_when_waiting(client, iid, "approved", {"approver": "ana"})
            results["signal"] = {**finish(client, iid), "refused_before_waiting": refused}
            results["signal_deadline"] = finish(client, client.start(signal_deadline, {}))
            results["signal_escalation"] = finish(client, client.start(escalation, {}))
            try:
                client.signal(iid, "approved", {"approver": "late"})
                results["signal_after_finish"] = "accepted"
            except grpc.RpcError as exc:
                results["signal_after_finish"] = exc.code().name

            results["sub_workflow"] = finish(client, client.start(parent, {}))
            results["for_each"] = finish(client, client.start(for_each, {"items": [1, 2, 3]}))
            results["for_each_empty"] = finish(client, client.start(for_each, {"items": []}))
            results["retries"] = finish(client, client.start(retries, {"key": "r1"}))
            results["exhausted"] = finish(client, client.start(exhausted, {}))
            results["permanent"] = finish(client, client.start(permanent_wf, {}))
            results["pinned"] = finish(client, client.start("up-pinned", {}, version=7))

            iid = client.start(sleeper, {}, correlation_id="corr-1")
            deadline = time.monotonic() + 30
            while client.instance(iid).context.get("first") is not True and time.monotonic() < deadline:
                time.sleep(0.05)
            client.cancel(iid, reason="cancelled by test")
            results["cancel"] = finish(client, iid)
            results["listed_cancelled"] = [
                v.id for v in client.list_instances(workflow="up-cancel", status="CANCELLED", limit=10)
            ] == [iid]

            schedule = client.create_schedule("up-tick", every_s=1, context={"k": 1})
            results["schedule_listed"] = schedule.id in [s.id for s in client.list_schedules()]
            deadline = time.monotonic() + 30
            ticked: list[Any] = []
            while not ticked and time.monotonic() < deadline:
                ticked = [v for v in client.list_instances(workflow="up-tick") if v.status == "COMPLETED"]
                time.sleep(0.1)
            client.delete_schedule(schedule.id)
            results["schedule"] = seen(ticked[0]) if ticked else None
            results["schedule_deleted"] = schedule.id not in [s.id for s in client.list_schedules()]
            try:
                client.start("no-such-workflow", {})
                results["unknown_workflow"] = "accepted"
            except grpc.RpcError as exc:
                results["unknown_workflow"] = exc.code().name
        finally:
            worker.stop()
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
