"""Workflows shared by tests/integration/test_cluster.py and the worker processes it starts.

Both sides build the same blueprints (same graph, so the same version); only the worker
processes run the handlers. Every handler execution appends one JSON line to
``<dir>/exec-<worker id>-<pid>.jsonl``: instance, node, attempt, worker, and the CLOCK_MONOTONIC
interval it ran in (one clock for every process on the host), so the test can prove that no
(instance, node) ran in two places at once. ``cluster_worker.py`` adds a line for every report
the server acknowledged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wiggle import ExecutionMode, RetryPolicy, Step, Workflow
from wiggle.workflow import Blueprint

MIXED = "cluster-mix"
PARKED = "cluster-parked"
PROBE = "cluster-probe"

NAP_SECONDS = 0.2  # the sleep of the mixed flow
PARK_SECONDS = (
    5.0  # the sleep of the parked flow: long enough that 120 starts on a loaded machine end before it
)
HOLD_SECONDS = 0.002  # every handler holds its step this long: a concurrent double run would overlap

#: Set by the worker process (cluster_worker.py) before it starts.
DIR: Path | None = None
WORKER_ID = ""
_lock = threading.Lock()
_fd: int | None = None


def write_line(record: dict[str, Any]) -> None:
    """Append one JSON line to this process's record file (one write: never interleaved)."""
    global _fd
    assert DIR is not None
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    with _lock:
        if _fd is None:
            path = DIR / f"exec-{WORKER_ID}-{os.getpid()}.jsonl"
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, data)


def read_records(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(executions, acknowledgements) written by every worker process so far."""
    runs: list[dict[str, Any]] = []
    acks: list[dict[str, Any]] = []
    for path in sorted(directory.glob("exec-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.endswith("}"):
                continue  # a line being written right now
            record = json.loads(line)
            (acks if "ack" in record else runs).append(record)
    return runs, acks


Compute = Callable[[dict[str, Any], Step], dict[str, Any]]


def _handler(node: str, compute: Compute) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A step handler running ``compute`` and recording the run (even when it raises)."""

    def handler(ctx: dict[str, Any]) -> dict[str, Any]:
        info = Step.current()
        t0 = time.monotonic()
        ok = False
        try:
            time.sleep(HOLD_SECONDS)
            result = compute(ctx, info)
            ok = True
            return result
        finally:
            write_line(
                {
                    "i": info.instance_id,
                    "n": node,
                    "a": info.attempt,
                    "w": info.worker_id,
                    "t0": t0,
                    "t1": time.monotonic(),
                    "ok": ok,
                }
            )

    handler.__name__ = node
    return handler


def _flaky(ctx: dict[str, Any], info: Step) -> dict[str, Any]:
    if info.attempt == 1:
        raise RuntimeError("designed failure on the first attempt")
    return {**ctx, "flaky": "ok"}


def mixed_flow() -> Blueprint[dict[str, Any]]:
    """prepare -> fork(left, right) -> join -> sleep 200 ms -> flaky (fails once) -> finish."""
    return (
        Workflow.define(MIXED)
        .execution(ExecutionMode.SERVER)
        .retry(RetryPolicy.fixed(5, 0.05))
        .step(_handler("prepare", lambda c, i: {**c, "prepared": True}))
        .fork(
            lambda b: b.step(_handler("left", lambda c, i: {**c, "left": 2 * c["n"]})),
            lambda b: b.step(_handler("right", lambda c, i: {**c, "right": 3 * c["n"]})),
        )
        .join()
        .sleep("nap", NAP_SECONDS)
        .step(_handler("flaky", _flaky), retry=RetryPolicy.exponential(5, 0.05, 2.0, 0.2))
        .step(_handler("finish", lambda c, i: {**c, "total": c["n"] + c["left"] + c["right"]}))
        .build()
    )


def mixed_expected(n: int) -> dict[str, Any]:
    """The context every mixed_flow instance started with {"n": n} ends with."""
    return {"n": n, "prepared": True, "left": 2 * n, "right": 3 * n, "flaky": "ok", "total": 6 * n}


#: worker nodes of the mixed flow and how often each runs when nothing goes wrong
MIXED_RUNS = {"prepare": 1, "left": 1, "right": 1, "flaky": 2, "finish": 1}


def parked_flow() -> Blueprint[dict[str, Any]]:
    """A 2 s server-side sleep first, then one step: instances park on a timer right at start."""
    return (
        Workflow.define(PARKED)
        .execution(ExecutionMode.SERVER)
        .retry(RetryPolicy.fixed(5, 0.05))
        .sleep("park", PARK_SECONDS)
        .step(_handler("after", lambda c, i: {**c, "after": True}))
        .build()
    )


def probe_flow() -> Blueprint[dict[str, Any]]:
    """One step on its own queue: only the worker that serves it can finish it."""
    return (
        Workflow.define(PROBE)
        .execution(ExecutionMode.SERVER)
        .step(_handler("probe", lambda c, i: {**c, "probed_by": i.worker_id}))
        .build()
    )


FLOWS = {MIXED: mixed_flow, PARKED: parked_flow, PROBE: probe_flow}
