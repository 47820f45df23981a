"""A worker process for the end-to-end tests.

    python run_worker.py TARGET MODE DIR [--block-at NODE] [--worker-id ID]

Serves e2e_flows.crash_flow(MODE) against the server at TARGET until SIGTERM/SIGINT (a graceful
close) or SIGKILL (an unclean death). Writes ``DIR/ready-<pid>`` just before it starts.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_flows  # noqa: E402

from wiggle import ExecutionMode, Worker, WorkerOptions  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("mode", choices=[m.value for m in ExecutionMode])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--block-at", default="")
    parser.add_argument("--worker-id", default="")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.WARNING, format=f"[worker {os.getpid()}] %(levelname)s %(name)s: %(message)s"
    )
    e2e_flows.DIR = args.dir
    e2e_flows.BLOCK_AT = args.block_at
    options = WorkerOptions(worker_id=args.worker_id or f"proc-{os.getpid()}", concurrency=4)
    worker = Worker(args.target, [e2e_flows.crash_flow(ExecutionMode(args.mode))], options)
    (args.dir / f"ready-{os.getpid()}").write_text("")
    worker.run()  # returns after SIGTERM/SIGINT, once close() drained the running steps


if __name__ == "__main__":
    main()
