"""The README's "A first workflow", run as a newcomer runs it: `wiggle server`, a worker process
and the client script, three processes on loopback (only the port differs from the README's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from upstream.servers import WIGGLE, ServerProcess, server_env

README = Path(__file__).resolve().parents[2] / "README.md"
README_TARGET = "127.0.0.1:7233"


# Reads back the instance the README's script started: its worker steps and how long it ran.
HISTORY = """
from wiggle import Client
with Client({target!r}) as client:
    (info,), _ = client.list(workflow="orders")
    history = client.history(info.instance_id)
    print([(h.node_id, h.outcome, h.attempt) for h in history if h.kind in ("TASK", "PREDICATE")])
    print(info.finished_at - info.created_at)
"""


def _first_workflow() -> str:
    section = README.read_text().split("## A first workflow", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the section has no python example"
    return code.group(1)


@pytest.mark.timeout(180)
def test_the_readme_first_workflow_completes_against_a_real_server(tmp_path: Path) -> None:
    code = _first_workflow()
    assert code.count(README_TARGET) == 1, "the example names the server's address once"
    client_part = code.split('if __name__ == "__main__":', 1)[1]
    assert "wiggle worker orders:orders" in client_part and "python orders.py" in client_part
    server = ServerProcess(tmp_path / "server.log", server_env())
    worker = None
    try:
        # saved as orders.py, run as the example says: `wiggle worker orders:orders`, `python orders.py`
        (tmp_path / "orders.py").write_text(code.replace(README_TARGET, server.target))
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [*WIGGLE, "--target", server.target, "worker", "orders:orders"],
                cwd=tmp_path,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        run = subprocess.run(
            [sys.executable, "orders.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stdout + run.stderr + (tmp_path / "worker.log").read_text()
        # price: 3 x 1250; the gate lets 3 through; charge ran on the payments queue
        assert (
            run.stdout.strip() == "{'order_id': 'o-1', 'quantity': 3, 'total_cents': 3750, 'charged': True}"
        )
        assert "client.register(orders)" in client_part  # the client, not the worker, registers
        # A clean history: one worker serves both queues, and the run hands back at the queue change
        # instead of chaining onto `payments` and waiting out a lease (docs/semantics.md#chaining-across-queues).
        (tmp_path / "history.py").write_text(HISTORY.format(target=server.target))
        seen = subprocess.run(
            [sys.executable, "history.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert seen.returncode == 0, seen.stdout + seen.stderr
        steps, spent_ms = seen.stdout.strip().splitlines()
        assert (
            steps == "[('price', 'COMPLETED', 1), ('in_stock', 'COMPLETED', 1), ('charge', 'COMPLETED', 1)]"
        )
        # Not a speed check: a lease waited out at the queue change would take the server's whole
        # 30 s lease; half of it stays far from any load the machine can be under.
        assert int(spent_ms) < 15_000, f"{spent_ms} ms from start to finish: was a lease waited out?"
        assert "lease expired" not in (tmp_path / "worker.log").read_text()
        # SIGTERM drains the worker, which then exits 0
        worker.terminate()
        assert worker.wait(30) == 0, (tmp_path / "worker.log").read_text()
        worker = None
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(30)
        server.stop()
