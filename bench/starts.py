"""Start throughput (issue #16 targets): ``Client.start`` from T threads, and ``start_many``.

    python bench/starts.py --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/starts.py                       # the in-memory store

Runs a real ``wiggle server`` subprocess (a fresh PostgreSQL schema, dropped afterwards), registers
a one-step workflow and measures, with no worker running (only the starts are timed):

- ``threads``: ``--instances`` starts from ``--threads`` OS threads, each with its own blocking
  ``Client`` (as independent callers), then all sharing one ``Client`` (as the threads of one
  application; their concurrent starts batch themselves: wiggle/_client/batching.py), starts/s
  over the span and start latency p50/p99;
- ``start_many``: one ``Client.start_many`` call of ``--many`` contexts (chunks of 1,000).

``--request-ids`` gives every start of the threads a request id of its own (as a client that
retries its starts safely does: docs/failover.md), so what an idempotent start costs shows;
``--dedup-keys`` a deduplication key of its own (docs/flow-control.md#deduplication).

Both run in one invocation, so their ratio is measured under the same machine load.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import psycopg
from psycopg import sql

from wiggle import Client, Workflow


def bump(ctx: dict[str, object]) -> dict[str, object]:
    return ctx


FLOW = Workflow.define("bench-starts").step(bump).build()


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(target: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Client(target) as client:
                client.list_workflows()
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def threads_run(
    target: str,
    total: int,
    threads: int,
    shared: Client | None = None,
    request_ids: str = "",
    dedup_keys: str = "",
) -> dict[str, float]:
    """``total`` starts from ``threads`` threads, each with its own client or all with ``shared``;
    with ``request_ids`` (a prefix unique to the run), start i has request id "<prefix>-<i>", with
    ``dedup_keys`` deduplication key "<prefix>-<i>"."""
    lock = threading.Lock()
    taken = [0]
    latencies: list[float] = []
    errors: list[BaseException] = []

    def starts(client: Client) -> None:
        while True:
            with lock:
                if taken[0] >= total:
                    return
                taken[0] += 1
                n = taken[0]
            t0 = time.perf_counter()
            client.start(
                FLOW.name,
                {"n": 1},
                request_id=f"{request_ids}-{n}" if request_ids else "",
                dedup_key=f"{dedup_keys}-{n}" if dedup_keys else "",
            )
            latencies.append(time.perf_counter() - t0)

    def run() -> None:
        try:
            if shared is not None:
                starts(shared)
            else:
                with Client(target) as client:
                    starts(client)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    span = time.perf_counter() - t0
    if errors:
        raise errors[0]
    latencies.sort()
    return {
        "starts_per_s": total / span,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def many_run(target: str, total: int) -> dict[str, float]:
    contexts = [{"n": i} for i in range(total)]
    with Client(target) as client:
        t0 = time.perf_counter()
        ids = client.start_many(FLOW.name, contexts)
        span = time.perf_counter() - t0
    assert len(ids) == total
    return {"starts_per_s": total / span, "seconds": span}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default="")
    p.add_argument("--instances", type=int, default=4000, help="starts of the threads run")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument(
        "--clients",
        default="own,shared",
        help="own: each thread its own Client; shared: one Client whose starts batch themselves; "
        "both (the default): one after the other in each run",
    )
    p.add_argument("--many", type=int, default=20000, help="contexts of the start_many run (0: none)")
    p.add_argument("--repeat", type=int, default=2, help="runs of each measurement")
    p.add_argument("--request-ids", action="store_true", help="every start of the threads with a request id")
    p.add_argument(
        "--dedup-keys", action="store_true", help="every start of the threads with a deduplication key"
    )
    p.add_argument(
        "--py-spy",
        metavar="OUT",
        default="",
        help="profile the server during the threads runs with py-spy (collapsed stacks to OUT)",
    )
    args = p.parse_args()

    port = free_port()
    target = f"127.0.0.1:{port}"
    argv = [sys.executable, "-m", "wiggle.cli", "server", "--port", str(port)]
    schema = f"wiggle_bench_starts_{os.getpid()}"
    if args.database_url:
        argv += ["--database-url", args.database_url, "--database-schema", schema]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(target)
        with Client(target) as client:
            client.register(FLOW)
        store = "PostgreSQL" if args.database_url else "memory"
        print(f"store: {store}; load average before: {os.getloadavg()[0]:.2f}")
        for run in range(args.repeat):
            spy = None
            if args.py_spy:
                spy = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(server.pid), "--format", "raw", "--nonblocking"]
                    + ["--rate", "200", "-o", f"{args.py_spy}.{run + 1}"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
            for clients in args.clients.split(","):
                ids = f"{schema}-{run}-{clients}" if args.request_ids else ""
                keys = f"{schema}-{run}-{clients}" if args.dedup_keys else ""
                cpu0 = proc_cpu(server.pid), own_cpu()
                if clients == "shared":
                    with Client(target) as client:
                        t = threads_run(target, args.instances, args.threads, client, ids, keys)
                else:
                    t = threads_run(target, args.instances, args.threads, request_ids=ids, dedup_keys=keys)
                cpu1 = proc_cpu(server.pid), own_cpu()
                t["server_cpu_ms"] = (cpu1[0] - cpu0[0]) / args.instances * 1000
                t["client_cpu_ms"] = (cpu1[1] - cpu0[1]) / args.instances * 1000
                print(
                    f"run {run + 1}: start x{args.threads} threads ({clients} clients"
                    f"{', request ids' if ids else ''}{', dedup keys' if keys else ''}): "
                    f"{t['starts_per_s']:,.0f} starts/s (p50 {t['p50_ms']:.1f} ms, p99 {t['p99_ms']:.1f} ms; "
                    f"CPU ms/start: server {t['server_cpu_ms']:.2f}, clients {t['client_cpu_ms']:.2f})"
                )
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
            if args.many <= 0:  # --many 0: the threads' runs only
                continue
            cpu0 = proc_cpu(server.pid), own_cpu()
            m = many_run(target, args.many)
            cpu1 = proc_cpu(server.pid), own_cpu()
            m["server_cpu_ms"] = (cpu1[0] - cpu0[0]) / args.many * 1000
            print(
                f"run {run + 1}: start_many({args.many}): {m['starts_per_s']:,.0f} starts/s "
                f"(server CPU ms/start {m['server_cpu_ms']:.3f})"
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        server.terminate()
        server.wait(30)
        if args.database_url:
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
