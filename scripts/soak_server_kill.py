"""Server-kill soak: no step may be recorded COMPLETED without its handler's effect.

    python scripts/soak_server_kill.py --mode SERVER --instances 150 --kills 8

Starts `wiggle server` on a loopback port over PostgreSQL (a schema of its own, dropped at the
end), two worker processes and a client that starts the instances of a 10-step workflow whose
every step leaves its mark in the context (``s0``..``s9``); kills the server with SIGKILL every
``--every`` seconds while the workers run and restarts it on the same port. The workers keep their
default report retries (UNAVAILABLE, DEADLINE_EXCEEDED), which is what resends a report whose first
answer was lost. At the end every instance must be COMPLETED with all ten marks: a report applied
to a later claim than its own (docs/semantics.md#fencing) shows up as a missing mark. Exit 0 when
clean, 1 otherwise; prints one line of figures. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

STEPS = 10

FLOW = textwrap.dedent(
    f"""
    import os
    from wiggle import ExecutionMode, Workflow

    def mark(i):
        def step(ctx):
            return {{**ctx, f"s{{i}}": True}}
        step.__name__ = f"s{{i}}"
        return step

    wf = Workflow.define("soak").execution(ExecutionMode[os.environ["SOAK_MODE"]])
    for i in range({STEPS}):
        wf = wf.step(mark(i))
    soak = wf.build()
    """
)

WORKER = textwrap.dedent(
    """
    import sys
    from wiggle import Worker, WorkerOptions
    from soak_flow import soak
    Worker(sys.argv[1], [soak], WorkerOptions(concurrency=16)).run()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC"], default="SERVER")
    parser.add_argument("--instances", type=int, default=150)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--every", type=float, default=2.0, help="seconds between kills")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    import psycopg

    from wiggle import Client

    schema = f"wiggle_soak_{uuid.uuid4().hex[:10]}"
    port = free_port()
    target = f"127.0.0.1:{port}"
    work = Path(tempfile.mkdtemp(prefix="wiggle-soak-"))
    (work / "soak_flow.py").write_text(FLOW)
    (work / "soak_worker.py").write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    env.update(
        SOAK_MODE=args.mode,
        PYTHONPATH=str(work),
        PYTHONUNBUFFERED="1",
        WIGGLE_DATABASE_URL=args.database_url,
        WIGGLE_DATABASE_SCHEMA=schema,
        WIGGLE_HOST="127.0.0.1",
        WIGGLE_LEASE_MILLIS="5000",
    )
    wiggle = [sys.executable, "-m", "wiggle.cli"]
    log = open(work / "server.log", "ab")

    def start_server() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([*wiggle, "server", "--port", str(port)], env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return proc
            time.sleep(0.05)
        raise SystemExit(f"server did not start; see {work / 'server.log'}")

    server = start_server()
    workers = [
        subprocess.Popen(
            [sys.executable, str(work / "soak_worker.py"), target],
            env=env,
            stdout=open(work / f"worker{i}.log", "ab"),
            stderr=subprocess.STDOUT,
        )
        for i in range(2)
    ]
    sys.path.insert(0, str(work))
    os.environ["SOAK_MODE"] = args.mode
    from soak_flow import soak  # type: ignore[import-not-found]

    ids: list[str] = []
    kills = 0
    try:
        with Client(target) as client:
            client.register(soak)
            for i in range(args.instances):
                ids.append(client.start("soak", {"n": i}).instance_id)
        next_kill = time.monotonic() + args.every
        while kills < args.kills:
            time.sleep(max(0.0, next_kill - time.monotonic()))
            server.send_signal(signal.SIGKILL)
            server.wait()
            kills += 1
            server = start_server()
            next_kill = time.monotonic() + args.every
        missing: list[str] = []
        last_kill = time.monotonic()
        finished = last_kill
        redelivered = 0
        statuses: dict[str, int] = {}
        deadline = time.monotonic() + 240
        with Client(target) as client:
            for iid in ids:
                info = client.wait(iid, timeout=max(1.0, deadline - time.monotonic()))
                statuses[info.status] = statuses.get(info.status, 0) + 1
                lost = [f"s{i}" for i in range(STEPS) if not info.context.get(f"s{i}")]
                if lost:
                    missing.append(f"{iid} {info.status} lacks {lost}")
            finished = time.monotonic()
            # attempts that did not complete: a lease that ran out (a step whose worker never got
            # it, or whose report was given up) is one, the step's next attempt the other
            for iid in ids:
                for entry in client.history(iid):
                    if entry.kind == "TASK" and entry.outcome != "COMPLETED":
                        redelivered += 1
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
        server.terminate()
        server.wait(30)
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(
        f"mode={args.mode} instances={len(ids)} kills={kills} statuses={statuses} "
        f"instances_with_a_step_lacking_its_effect={len(missing)} "
        f"attempts_not_completed={redelivered} drained_after_last_kill={finished - last_kill:.1f}s"
    )
    for line in missing[:20]:
        print("  ", line)
    return 0 if not missing and statuses.get("COMPLETED") == len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
