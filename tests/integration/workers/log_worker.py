"""A worker process for the logging tests: ``python log_worker.py TARGET MODE``.

Serves "log-flow": ``greet`` logs a line of its own, then ``charge`` raises on every attempt.
Logging is left to ``Worker.run`` (WIGGLE_LOG_LEVEL / WIGGLE_LOG_FORMAT from the environment).
"""

from __future__ import annotations

import logging
import sys

from wiggle import ExecutionMode, RetryPolicy, Worker, WorkerOptions, Workflow

log = logging.getLogger("shop")


def greet(ctx: dict) -> dict:
    log.info("greeting a customer")  # a user's own line: carries the step's fields in JSON
    return {**ctx, "greeted": True}


def charge(ctx: dict) -> dict:
    raise RuntimeError("card declined")


def flow(mode: ExecutionMode):
    return (
        Workflow.define("log-flow")
        .execution(mode)
        .step(greet)
        .step(charge, retry=RetryPolicy.fixed(2, 0.01))
        .build()
    )


if __name__ == "__main__":
    options = WorkerOptions(worker_id="log-worker-1", poll_wait_seconds=1.0)
    Worker(sys.argv[1], [flow(ExecutionMode(sys.argv[2]))], options).run()
