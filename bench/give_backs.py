"""What a worker without a step's handler costs while it waits for one that has it.

    python bench/give_backs.py [--instances 2000] [--seconds 10] [--database-url postgresql://...]

A rolling deploy's moment: a new version of a workflow adds the step "extra"; ``--instances`` of
it wait at that step while one worker of the old version (no handler for "extra") serves the
queue. For ``--seconds`` it measures the CPU the server and that worker spend, and how many
steps the worker gave back; then a worker of the new version starts, and it times how long that
worker takes to run every waiting step (with ``--keep-old`` the old worker stays up meanwhile,
passing those steps over). Each process is a real one: ``wiggle server`` (in memory
unless ``--database-url``) and two worker processes of this file. Every instance's final
context is checked.

Before the server passed a given-back node over in its worker's claims
(wiggle/_server/unrunnable.py), the old worker claimed and gave back the new steps as fast as it
polled (bench/README.md, "Round thirty-seven": about 2,700 give-backs a second).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from wiggle import Client, Worker, WorkerOptions, Workflow

QUEUE = "give-backs"


def first(ctx: dict) -> dict:
    return {**ctx, "first": True}


def extra(ctx: dict) -> dict:
    return {**ctx, "extra": True}


OLD = Workflow.define("give-backs", dict).step(first, queue=QUEUE).build()
NEW = Workflow.define("give-backs", dict).step(first, queue=QUEUE).step(extra, queue=QUEUE).build()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time so far (Linux: /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_worker(target: str, which: str, stats_file: str) -> None:
    """A worker process: the old blueprint or the new one, until SIGTERM; its stats to a file."""
    worker = Worker(target, [OLD if which == "old" else NEW], WorkerOptions(concurrency=16))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()
    Path(stats_file).write_text(json.dumps({"released": worker.stats.released}))


def _wait_for(client: Client, seconds: float = 30.0) -> None:
    """Until the server answers (it has just been started)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            client.list_workflows()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg  # the postgres extra: there whenever a database URL is given

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _spawn_worker(target: str, which: str, stats_file: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--worker", which, target, str(stats_file)])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--database-url", default="")
    parser.add_argument(
        "--keep-old", action="store_true", help="keep the old worker up while the new one runs the steps"
    )
    parser.add_argument(
        "--worker", nargs=3, metavar=("WHICH", "TARGET", "STATS_FILE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker[1], args.worker[0], args.worker[2])
        return 0
    port = _free_port()
    target = f"127.0.0.1:{port}"
    command = [sys.executable, "-m", "wiggle", "server", "--host", "127.0.0.1", "--port", str(port)]
    schema = f"give_backs_{os.getpid()}"  # one of its own, dropped at the end
    if args.database_url:
        command += ["--database-url", args.database_url, "--database-schema", schema]
    server = subprocess.Popen(command)
    stats_dir = Path(f"/tmp/wiggle-give-backs-{os.getpid()}")
    stats_dir.mkdir(exist_ok=True)
    try:
        with Client(target) as client:
            _wait_for(client)
            client.register(NEW)
            ids = [client.start(NEW, {"n": n}).instance_id for n in range(args.instances)]
            old = _spawn_worker(target, "old", stats_dir / "old.json")
            try:
                deadline = time.monotonic() + 120
                while not all(
                    any(t.node_id == "extra" for t in client.get(i).tokens) for i in (ids[0], ids[-1])
                ):
                    if time.monotonic() > deadline:
                        raise SystemExit("the old worker never ran the first steps")
                    time.sleep(0.2)
                time.sleep(1.0)  # the first steps' last reports settle
                before = (_cpu_seconds(server.pid), _cpu_seconds(old.pid))
                time.sleep(args.seconds)
                after = (_cpu_seconds(server.pid), _cpu_seconds(old.pid))
                if not args.keep_old:
                    _stop(old)
                started, drain_cpu = time.monotonic(), _cpu_seconds(server.pid)
                new = _spawn_worker(target, "new", stats_dir / "new.json")
                try:
                    for i in ids:
                        done = client.result(i, timeout=300)
                        if done.context != {"n": done.context.get("n"), "first": True, "extra": True}:
                            raise SystemExit(f"instance {i} ended {done.status} with {done.context}")
                    took = time.monotonic() - started
                    drain_cpu = _cpu_seconds(server.pid) - drain_cpu
                finally:
                    _stop(new)
            finally:
                _stop(old)
            released = json.loads((stats_dir / "old.json").read_text())["released"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        if args.database_url:
            _drop_schema(args.database_url, schema)
    store = "postgresql" if args.database_url else "memory"
    print(
        f"{args.instances} instances waiting at a new step, one old worker, {store} store, {args.seconds:.0f} s:\n"
        f"  server CPU {after[0] - before[0]:.2f} s, old worker CPU {after[1] - before[1]:.2f} s, "
        f"{released} give-backs in all\n"
        f"  a new worker then ran the {args.instances} waiting steps in {took:.2f} s, server CPU {drain_cpu:.2f} s"
        f" ({'the old worker still up' if args.keep_old else 'the old worker stopped'}; every context checked)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
