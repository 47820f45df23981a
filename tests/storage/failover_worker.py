"""The workflow of tests/storage/test_failover.py and the worker process that runs it.

    python failover_worker.py TARGET DIR WORKER_ID

Serves ``failover_flow`` against the server(s) at TARGET until SIGTERM. Every handler run appends
one JSON line to ``DIR/runs-<WORKER_ID>.jsonl`` (task, instance, node, attempt, the
CLOCK_MONOTONIC interval it ran in) and every report the server acknowledged one line ``{"ack":
task}``: the test checks that each acknowledged report is in the history after the fail-over.
Writes ``DIR/ready-<WORKER_ID>`` once started.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from wiggle import ExecutionMode, Step, Worker, WorkerOptions, Workflow
from wiggle.workflow import Blueprint

FLOW = "failover"
NAP_SECONDS = 0.1  # a server-side timer: only the clock leader fires it

_lock = threading.Lock()
_fd: int | None = None
_path: Path | None = None


def write_line(record: dict[str, Any]) -> None:
    """Append one JSON line (one write: lines of two threads never interleave)."""
    global _fd
    assert _path is not None
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    with _lock:
        if _fd is None:
            _fd = os.open(_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, data)


def read_lines(directory: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """(handler runs, acknowledged task ids) of every worker process."""
    runs: list[dict[str, Any]] = []
    acks: set[str] = set()
    for path in sorted(directory.glob("runs-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.endswith("}"):  # a line being written now is left out
                record = json.loads(line)
                if "ack" in record:
                    acks.add(record["ack"])
                else:
                    runs.append(record)
    return runs, acks


def _recorded(node: str, compute: Any) -> Any:
    def handler(ctx: dict[str, Any]) -> dict[str, Any]:
        info = Step.current()
        t0 = time.monotonic()
        result = compute(ctx)
        write_line(
            {
                "t": info.task_id,
                "i": info.instance_id,
                "n": node,
                "a": info.attempt,
                "t0": t0,
                "t1": time.monotonic(),
            }
        )
        return dict(result)

    handler.__name__ = node
    return handler


def failover_flow() -> Blueprint[dict[str, Any]]:
    """a (a step) -> nap (a 100 ms timer) -> go (waits for the signal "go") -> b (a step)."""
    return (
        Workflow.define(FLOW)
        .execution(ExecutionMode.SERVER)
        .step(_recorded("a", lambda c: {**c, "a": c["n"]}))
        .sleep("nap", NAP_SECONDS)
        .wait_signal("go", key="go")
        .step(_recorded("b", lambda c: {**c, "b": c["a"] + c["go"]["k"]}))
        .build()
    )


def expected(n: int) -> dict[str, Any]:
    """The context of an instance started with {"n": n} and signalled {"k": n}, once complete."""
    return {"n": n, "a": n, "go": {"k": n}, "b": 2 * n}


def _record_acks() -> None:
    """Instrumentation only: a line per report the server acknowledged (Reporter.complete
    returns None when the report was refused or given up, wiggle/_worker/reporter.py)."""
    from wiggle._worker.reporter import Reporter

    complete = Reporter.complete

    async def recorded(self: Reporter, request: Any, *more: Any) -> Any:
        result = await complete(self, request, *more)
        if result is not None:
            write_line({"ack": request.task_id})
        return result

    Reporter.complete = recorded  # type: ignore[assignment,method-assign]


def main() -> None:
    global _path
    target, directory, worker_id = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s [worker {worker_id}] %(levelname)s %(name)s: %(message)s",
    )
    _path = directory / f"runs-{worker_id}.jsonl"
    _record_acks()
    options = WorkerOptions(worker_id=worker_id, concurrency=8, poll_wait_seconds=2)
    worker = Worker(target, [failover_flow()], options)
    (directory / f"ready-{worker_id}").write_text(str(os.getpid()))
    worker.run()  # registers the blueprint, then serves until SIGTERM/SIGINT


if __name__ == "__main__":
    main()
