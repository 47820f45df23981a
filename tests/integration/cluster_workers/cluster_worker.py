"""A worker process for tests/integration/test_cluster.py.

    python cluster_worker.py TARGET DIR --worker-id ID [--flows a,b] [--transport stream|unary]

Serves the named cluster_flows blueprints against the server at TARGET until SIGTERM/SIGINT.
Besides the execution lines the handlers write, it appends one line per report the server
acknowledged (CompleteTask / FailTask answered OK), naming the instance, node and attempt: the
test checks that no acknowledged report was lost. Writes ``DIR/ready-<ID>`` once started.
"""

from __future__ import annotations

import argparse
import contextvars
import logging
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cluster_flows  # noqa: E402

from wiggle import Worker, WorkerOptions  # noqa: E402
from wiggle._rpc import wiggle_pb2 as pb  # noqa: E402

_activation: contextvars.ContextVar[Any] = contextvars.ContextVar("activation")


def _instrument() -> None:
    """Record acknowledged reports. Instrumentation only: the worker's behaviour is unchanged.

    ``run_server_step`` (wiggle/_worker/server_step.py) runs one SERVER-mode step in its own
    asyncio task and reports it through ``Reporter.complete`` / ``Reporter.fail``, which retry
    UNAVAILABLE and return None when the server refused the report; a contextvar set around
    ``run_server_step`` tells them which activation they report.
    """
    from wiggle._worker import worker as worker_module
    from wiggle._worker.reporter import Reporter

    run_server_step = worker_module.run_server_step
    complete, fail = Reporter.complete, Reporter.fail

    async def traced_run_server_step(*args: Any) -> Any:
        # the activation is the argument of that type (the queues that ask for a chained step follow)
        _activation.set(next(a for a in args if isinstance(a, pb.TaskActivation)))
        return await run_server_step(*args)

    def acknowledged(method: str, result: Any) -> None:
        act = _activation.get(None)
        if result is not None and act is not None:
            cluster_flows.write_line(
                {
                    "ack": method,
                    "i": act.instance_id,
                    "n": act.node_id,
                    "a": act.attempt,
                    "w": cluster_flows.WORKER_ID,
                }
            )

    async def traced_complete(self: Reporter, request: Any, *more: Any) -> Any:
        result = await complete(self, request, *more)
        acknowledged("CompleteTask", result)
        return result

    async def traced_fail(self: Reporter, request: Any, *more: Any) -> Any:
        result = await fail(self, request, *more)
        acknowledged("FailTask", result)
        return result

    worker_module.run_server_step = traced_run_server_step  # type: ignore[assignment]
    Reporter.complete = traced_complete  # type: ignore[method-assign]
    Reporter.fail = traced_fail  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--flows", default=cluster_flows.MIXED)
    parser.add_argument("--transport", default="stream", choices=["stream", "unary"])
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s [worker {args.worker_id} {os.getpid()}] %(levelname)s %(name)s: %(message)s",
    )
    cluster_flows.DIR = args.dir
    cluster_flows.WORKER_ID = args.worker_id
    _instrument()
    blueprints = [cluster_flows.FLOWS[name]() for name in args.flows.split(",")]
    options = WorkerOptions(
        worker_id=args.worker_id,
        concurrency=args.concurrency,
        transport=args.transport,
        poll_wait_seconds=5,
    )
    worker = Worker(args.target, blueprints, options)
    (args.dir / f"ready-{args.worker_id}").write_text(str(os.getpid()))
    worker.run()  # registers the blueprints, then serves until SIGTERM/SIGINT


if __name__ == "__main__":
    main()
