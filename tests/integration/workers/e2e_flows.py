"""Workflows shared by tests/integration/test_e2e_worker.py and the worker processes it starts.

Both sides build the same blueprint (same name, same graph, so the same version); only the
worker process runs the handlers. Each execution leaves one file in ``<dir>/exec/`` so the test
can count executions across processes. The step named ``BLOCK_AT`` writes ``<dir>/blocked`` and
then waits for ``<dir>/release`` (which a SIGKILL test never creates).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from wiggle import ExecutionMode, RetryPolicy, Step, Workflow
from wiggle.workflow import Blueprint

STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")

#: Set by the worker process (run_worker.py) before it starts.
DIR: Path | None = None
BLOCK_AT = ""


def executions(directory: Path) -> list[dict[str, Any]]:
    """Every recorded execution, in no particular order."""
    folder = directory / "exec"
    if not folder.exists():
        return []
    return [json.loads(p.read_text()) for p in folder.iterdir() if p.suffix == ".json"]


def _record(node: str) -> None:
    assert DIR is not None
    info = Step.current()
    record = {
        "node": node,
        "attempt": info.attempt,
        "worker": info.worker_id,
        "pid": os.getpid(),
        "t": time.time(),
    }
    folder = DIR / "exec"
    folder.mkdir(exist_ok=True)
    tmp = folder / f".{uuid.uuid4().hex}"
    tmp.write_text(json.dumps(record))
    tmp.rename(folder / f"{node}-{uuid.uuid4().hex}.json")  # atomic: the test never reads half a file


def _block(node: str) -> None:
    assert DIR is not None
    if node != BLOCK_AT:
        return
    (DIR / "blocked").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (DIR / "release").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("never released")
        time.sleep(0.02)


def _step(node: str, index: int):
    def handler(ctx: dict[str, Any]) -> dict[str, Any]:
        _record(node)
        _block(node)
        return {**ctx, node: index}  # idempotent: a replay computes the same context

    handler.__name__ = node
    return handler


def crash_flow(mode: ExecutionMode) -> Blueprint[dict]:
    """s1 .. s6 on one queue, in ``mode``; quick retries so a lost lease is redelivered at once."""
    wf = (
        Workflow.define(f"crash-{mode.value.lower().replace('_', '-')}")
        .execution(mode)
        .retry(RetryPolicy.fixed(5, 0.05))
    )
    for index, node in enumerate(STEPS, 1):
        wf = wf.step(_step(node, index))
    return wf.build()


def expected_context() -> dict[str, int]:
    """The context every crash_flow instance converges to."""
    return {node: index for index, node in enumerate(STEPS, 1)}
