"""The upstream half of a mixed fleet: upstream's Worker serving queues our worker serves too.

``python mixed_fleet.py HOST:PORT STOP_FILE`` (the wiggle-client venv's python): registers
``mix-up`` with upstream's DSL, binds by name (``Worker.handle``) the steps of ``mix-ours``,
which our client registered, and serves both until STOP_FILE exists. Every handler stamps the
context with "upstream", so the test (tests/upstream/test_mixed_fleet.py) sees who ran what.
Prints one JSON line: the steps this worker ran.
"""

# ruff: noqa: I001  (`wiggle` here is upstream's package, a third-party one, not ours)
from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from wiggle import WiggleClient, Worker, Workflow

TARGET, STOP_FILE = sys.argv[1], sys.argv[2]
STEPS = ("s1", "s2", "s3", "s4")
ran: dict[str, int] = {}
lock = threading.Lock()


def stamp(workflow: str, step: str) -> Any:
    def handler(o: dict) -> dict:
        with lock:
            ran[f"{workflow}/{step}"] = ran.get(f"{workflow}/{step}", 0) + 1
        time.sleep(0.02)  # a little work, so neither worker drains the queue alone
        return {**o, step: "upstream", "total": o.get("total", 0) + 1}

    return handler


builder = Workflow("mix-up")
for name in STEPS:
    builder = builder.step(name, stamp("mix-up", name))
mix_up = builder.build()


def main() -> None:
    with WiggleClient(TARGET) as client:
        worker = Worker(client, "upstream-mixed", concurrency=4, long_poll_wait_s=0.5, idle_backoff_s=0.02)
        worker.register(mix_up)
        for name in STEPS:
            worker.handle("mix-ours", name, stamp("mix-ours", name))
        worker.start()
        print("ready", flush=True)
        try:
            deadline = time.monotonic() + 180
            while not os.path.exists(STOP_FILE) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            worker.stop()
    print(json.dumps(ran, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
