"""Upstream Wiggle's published Python client, unchanged, against a real ``wiggle server`` process.

The client (PyPI wiggle-client 0.1.1) runs in its own venv (the ``upstream_python`` fixture,
tests/upstream/conftest.py) as tests/upstream/scenarios/upstream_scenarios.py, on both stores:
the README quick start, a gate, a sleep, fork/join with a gate in a branch, choose, do_while, a
signal (with a deadline, with an escalation), a schedule, a sub-workflow, a for-each, retries,
a permanent failure, a cancel, a pinned version. It prints what it saw; this file checks it
against the contexts upstream's semantics give.
"""

from __future__ import annotations

from typing import Any

from .servers import ServerProcess, run_upstream


def test_upstream_client_runs_unchanged(upstream_python: str, server: ServerProcess) -> None:
    seen = run_upstream(upstream_python, "upstream_scenarios.py", server.target)

    assert seen["health"]["status"] == "UP"
    assert seen["cluster"]["members"] and seen["cluster"]["members"][0]["alive"]
    assert {"up-order", "up-parent", "up-child", "up-foreach"} <= set(seen["workflows"])
    # the register result is upstream's int version: its content hash, or the pinned number
    assert seen["registered_again"] == seen["versions"]["up-order"]
    assert seen["get_workflow_steps"] == [
        "up-order#charge",
        "up-order#in-stock",
        "up-order#notify",
        "up-order#validate",
    ]

    def done(name: str, **context: Any) -> dict[str, Any]:
        got = seen[name]
        assert got["status"] == "COMPLETED", (name, got)
        assert got["context"] == context, (name, got["context"])
        return dict(got)

    quick = done("quickstart", orderId="A-1", quantity=3, status="VALIDATED", charged=30)
    assert quick["version"] == seen["versions"]["up-order"]
    gated = done("gated", orderId="A-2", quantity=0, status="VALIDATED")
    assert gated["termination_reason"] == "gated:in-stock"

    fork = seen["fork_join"]
    assert fork["status"] == "COMPLETED"
    # branches merge last-write-wins: both wrote "shared", whichever arrived last is kept
    assert fork["context"].pop("shared") in ("left", "right")
    assert fork["context"] == {"n": 1, "left": 2, "right": 2, "right2": True, "size": "big", "sum": 4}
    gated_branch = seen["fork_join_gated"]
    assert gated_branch["status"] == "COMPLETED"
    assert "right2" not in gated_branch["context"] and gated_branch["context"]["sum"] == 4

    done("do_while", i=3)
    done("signal", order=9, asked=True, approver="ana", shipped_by="ana")
    assert seen["signal_after_finish"] == "FAILED_PRECONDITION"
    assert seen["signal_deadline"]["status"] == "FAILED"
    assert "never" in (seen["signal_deadline"]["error"] or "")
    done("signal_escalation", escalated=True, ended=True)

    done("sub_workflow", x=21, child_saw=21, from_child="yes", doubled=42)
    done("for_each", items=[1, 2, 3], **{"priced-0": 10, "priced-1": 20, "priced-2": 30}, total=60)
    done("for_each_empty", items=[], total=0)
    done("retries", key="r1", flaky_attempts=3, after=True)
    assert seen["exhausted"]["status"] == "FAILED"
    assert "card declined" in seen["exhausted"]["error"]
    assert seen["permanent"]["status"] == "FAILED"
    assert "no such customer" in seen["permanent"]["error"]
    pinned = done("pinned", pinned=True)
    assert pinned["version"] == 7

    assert seen["cancel"]["status"] == "CANCELLED"
    assert seen["cancel"]["termination_reason"] == "cancelled by test"
    assert seen["cancel"]["context"] == {"first": True}
    assert seen["listed_cancelled"] is True

    assert seen["schedule_listed"] and seen["schedule_deleted"]
    assert seen["schedule"]["status"] == "COMPLETED"
    assert seen["schedule"]["context"] == {"k": 1, "ticked": True}
    assert seen["unknown_workflow"] == "NOT_FOUND"
