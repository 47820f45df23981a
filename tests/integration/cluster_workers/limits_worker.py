"""A worker process for tests/integration/test_limits_cluster.py.

    python limits_worker.py TARGET DIR --worker-id ID

Serves the ``limits-cluster`` flow (one step limited to one attempt at a time per customer,
docs/flow-control.md#concurrency-limits) until SIGTERM/SIGINT. The handler checks the limit from
the outside, with the file system as the referee shared by every worker process: it creates
``DIR/held/<customer>`` exclusively (O_CREAT | O_EXCL) when it starts and removes it when it
ends, so a second attempt of one customer running at the same time, in any process, finds the
file there and writes ``DIR/overlaps/<customer>-<instance>``. Each run appends a line to
``DIR/runs-<ID>``. Writes ``DIR/ready-<ID>`` once started.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from wiggle import Limit, Step, Worker, WorkerOptions, Workflow

NAME = "limits-cluster"


def flow(directory: Path, worker_id: str) -> Any:
    held = directory / "held"
    overlaps = directory / "overlaps"
    runs = directory / f"runs-{worker_id}"

    def charge(ctx: dict[str, Any]) -> dict[str, Any]:
        customer = ctx["customer"]
        instance = Step.current().instance_id
        try:
            fd = os.open(held / customer, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            (overlaps / f"{customer}-{instance}").write_text(worker_id)
            return {**ctx, "charged": True}
        try:
            time.sleep(0.005)  # long enough for another claim of the customer to overlap it
        finally:
            os.close(fd)
            os.unlink(held / customer)
        with open(runs, "a") as out:
            out.write(f"{instance} {customer}\n")
        return {**ctx, "charged": True}

    return Workflow.define(NAME).step(charge, concurrency=Limit(key="customer", max=1)).build()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("dir", type=Path)
    parser.add_argument("--worker-id", required=True)
    args = parser.parse_args()
    (args.dir / "held").mkdir(exist_ok=True)
    (args.dir / "overlaps").mkdir(exist_ok=True)
    options = WorkerOptions(worker_id=args.worker_id, concurrency=8, poll_wait_seconds=5)
    worker = Worker(args.target, [flow(args.dir, args.worker_id)], options)
    (args.dir / f"ready-{args.worker_id}").write_text(str(os.getpid()))
    worker.run()  # registers the flow, then serves until SIGTERM/SIGINT


if __name__ == "__main__":
    main()
