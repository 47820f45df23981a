"""The yardstick of issue #28: what a team could write in an afternoon with psycopg alone.

    python bench/handwritten.py --per step --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/handwritten.py --per instance --json

The same workload as ``wiggle bench --submit during`` (src/wiggle/_bench/worker.py): a linear
S-step workflow whose step i sets ``s<i>`` to i and increments ``count``, I instances started with
``{"n": n, "count": 0}`` by T submitting threads while W worker processes of C threads each run
them. No engine: one table, one row per instance, its context a ``jsonb`` column that each step
reads into a dict, changes and writes back whole (Wiggle's handlers get and return a dict too).

- ``--per step``: a worker thread claims one due row (``FOR UPDATE SKIP LOCKED``), runs one step,
  writes the new context and step number and commits: one transaction per step, as Wiggle's
  SERVER and LOCAL_SYNC modes commit each step before the next runs.
- ``--per instance``: a worker thread claims a row, runs every step and commits once, as
  LOCAL_ASYNC commits a whole local run.

Durability is the database's, as for the Wiggle server: every commit (each start, each step or
instance) waits for ``synchronous_commit`` as the server has it set (neither side changes it; the
report prints it). A start is one INSERT committed on its own (autocommit), one connection per
submitting thread.

Timing: the worker threads connect first and wait; the clock starts when the submitting threads
are let go (they open their connections inside the window, as ``wiggle bench``'s shared client
opens its channel there) and stops at the last row's ``finished_at`` (the database's
``clock_timestamp()`` at the update that finished it; same machine, same clock). An idle worker
thread sleeps between empty claims, 1 ms doubling up to 20 ms (no LISTEN: the loop stays an
afternoon's). Every row is then checked against the exact expected context: a wrong or missing one
exits 1 and prints no figures.

Measured like ``wiggle bench`` (src/wiggle/_bench/): the loop runs in a database of its own
(pgstats.Postgres), so its committed transactions and PostgreSQL backends' CPU are exact, and the
CPU seconds of the roles (workers, PostgreSQL backends and background, this driver with its
submitting threads, interrupts, everything else) are read around the window.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import statistics
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from wiggle._bench.figures import percentile
from wiggle._bench.pgstats import Postgres
from wiggle._bench.probe import probe_ms
from wiggle._bench.processes import machine_busy, proc_cpu, self_cpu
from wiggle._bench.worker import expected_context, initial_context

IDLE_FIRST = 0.001
IDLE_MAX = 0.020
CONNECT_PATIENCE = 60.0
TABLE = sql.Identifier("hw_runs")


def step(ctx: dict[str, Any], i: int) -> dict[str, Any]:
    """Step ``i`` of the workflow: the same as the benchmark workflow's (src/wiggle/_bench/worker.py)."""
    ctx[f"s{i}"] = i
    ctx["count"] = ctx.get("count", 0) + 1
    return ctx


def connect(url: str, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A connection; waits (up to CONNECT_PATIENCE s) while the server has no slot free ("too many
    clients": the loop holds one per thread, on a server other programs share)."""
    deadline = time.monotonic() + CONNECT_PATIENCE
    while True:
        try:
            return psycopg.connect(url, autocommit=autocommit)
        except psycopg.OperationalError as exc:
            if "too many clients" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def create_table(url: str) -> None:
    with connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id bigint PRIMARY KEY, step int NOT NULL, done boolean NOT NULL DEFAULT false, "
                "ctx jsonb NOT NULL, finished_at timestamptz)"
            ).format(TABLE)
        )
        conn.execute(sql.SQL("CREATE INDEX hw_runs_due ON {} (id) WHERE NOT done").format(TABLE))


def work(url: str, steps: int, per: str, ready: Any, go: Any, stop: Any) -> None:
    """One worker thread: connect, say ready, wait for ``go``, then claim and run until ``stop``."""
    claim = sql.SQL(
        "SELECT id, step, ctx FROM {} WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ).format(TABLE)
    write = sql.SQL(
        "UPDATE {} SET step = %s, ctx = %s, done = %s, "
        "finished_at = CASE WHEN %s THEN clock_timestamp() END WHERE id = %s"
    ).format(TABLE)
    with connect(url) as conn:
        ready.put(1)
        go.wait()
        idle = IDLE_FIRST
        while not stop.is_set():
            with conn.transaction():
                row = conn.execute(claim).fetchone()
                if row is not None:
                    rid, done_steps, ctx = row
                    last = steps if per == "instance" else done_steps + 1
                    for i in range(done_steps + 1, last + 1):
                        ctx = step(ctx, i)
                    done = last >= steps
                    conn.execute(write, (last, Jsonb(ctx), done, done, rid))
            if row is None:
                time.sleep(idle)
                idle = min(idle * 2, IDLE_MAX)
            else:
                idle = IDLE_FIRST


def worker_process(url: str, steps: int, per: str, concurrency: int, ready: Any, go: Any, stop: Any) -> None:
    threads = [
        threading.Thread(target=work, args=(url, steps, per, ready, go, stop), daemon=True)
        for _ in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class Submitter:
    """``threads`` threads inserting instances 0..total-1 (a shared counter), one connection each."""

    def __init__(self, url: str, total: int, threads: int) -> None:
        self.total = total
        self.next = 0
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.errors: list[str] = []
        # connected before the timed window and closed after it, so that their backends' CPU is
        # in both of its snapshots (a backend gone by the second one would not be counted at all)
        self.conns = [connect(url, autocommit=True) for _ in range(min(threads, total))]
        self.threads = [threading.Thread(target=self.run, args=(conn,), daemon=True) for conn in self.conns]

    def take(self) -> int | None:
        with self.lock:
            if self.next >= self.total or self.errors:
                return None
            self.next += 1
            return self.next - 1

    def run(self, conn: psycopg.Connection[Any]) -> None:
        insert = sql.SQL("INSERT INTO {} (id, step, ctx) VALUES (%s, 0, %s)").format(TABLE)
        try:
            while (n := self.take()) is not None:
                began = time.perf_counter()
                conn.execute(insert, (n, Jsonb(initial_context(n))))
                self.latencies.append((time.perf_counter() - began) * 1000)
        except Exception as exc:
            self.errors.append(str(exc))

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def cpu_snapshot(pg: Postgres, workers: list[Any]) -> dict[str, Any]:
    return {
        "workers": [proc_cpu(w.pid) for w in workers],
        "pg": pg.cpu_snapshot(),
        "driver": self_cpu(),
        "machine": machine_busy(),
    }


def cpu_figures(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float | None]:
    """CPU seconds per role between two cpu_snapshot()s (the roles of ``wiggle bench``)."""
    from wiggle._bench.figures import cpu_delta

    w0, w1 = before["workers"], after["workers"]
    cpu: dict[str, float | None] = {
        "workers": None if None in w0 or None in w1 else round(sum(w1) - sum(w0), 3),
        "postgres_backends": round(cpu_delta(before["pg"][0], after["pg"][0]), 3),
        "postgres_background": round(cpu_delta(before["pg"][1], after["pg"][1]), 3),
        "driver": round(after["driver"] - before["driver"], 3),
    }
    total = sum(v for v in cpu.values() if v is not None)
    if before["machine"] is not None and after["machine"] is not None:
        busy = after["machine"][0] - before["machine"][0]
        irq = after["machine"][1] - before["machine"][1]
        cpu["irq"] = round(irq, 3)
        cpu["other"] = round(max(busy - irq - total, 0.0), 3)
    cpu["total"] = round(total, 3)
    return cpu


def verify(url: str, instances: int, steps: int) -> list[str]:
    """What is wrong with the finished rows (empty: every instance has exactly its expected context)."""
    with connect(url) as conn:
        rows = conn.execute(sql.SQL("SELECT id, done, ctx FROM {} ORDER BY id").format(TABLE)).fetchall()
    problems = []
    if len(rows) != instances:
        problems.append(f"{len(rows)} instances in the table, expected {instances}")
    wrong = [rid for rid, done, ctx in rows if not done or ctx != expected_context(rid, steps)]
    if wrong:
        problems.append(f"{len(wrong)} instances unfinished or with a wrong context (first: {wrong[:5]})")
    return problems


def drain(args: argparse.Namespace, pg: Postgres) -> dict[str, Any]:
    """Start the workers, let them and the submitters go, wait for the last row; the raw figures."""
    mp = multiprocessing.get_context("spawn")
    ready, go, stop = mp.Queue(), mp.Event(), mp.Event()
    workers = [
        mp.Process(
            target=worker_process,
            args=(pg.url, args.steps, args.per, args.concurrency, ready, go, stop),
            daemon=True,
        )
        for _ in range(args.workers)
    ]
    submitter: Submitter | None = None
    try:
        for w in workers:
            w.start()
        for _ in range(args.workers * args.concurrency):
            try:
                ready.get(timeout=CONNECT_PATIENCE + 30)
            except queue.Empty:
                return {"problems": ["the worker threads did not all connect (see their errors above)"]}
        submitter = Submitter(pg.url, args.instances, args.submit_threads)
        with connect(pg.url, autocommit=True) as conn:
            before = cpu_snapshot(pg, workers)
            t_go = time.time()
            go.set()
            for t in submitter.threads:
                t.start()
            deadline = time.monotonic() + args.timeout
            count = sql.SQL("SELECT count(*) FILTER (WHERE done), count(*) FROM {}").format(TABLE)
            while True:
                done, total = conn.execute(count).fetchone() or (0, 0)
                if (done >= args.instances and total >= args.instances) or submitter.errors:
                    break
                if time.monotonic() > deadline:
                    return {
                        "problems": [f"{done} of {args.instances} done within --timeout {args.timeout} s"]
                    }
                time.sleep(0.05)
            after = cpu_snapshot(pg, workers)
            row = conn.execute(
                sql.SQL("SELECT extract(epoch FROM max(finished_at)) FROM {}").format(TABLE)
            ).fetchone()
    finally:
        if submitter is not None:
            submitter.close()
        stop.set()
        go.set()
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
    assert submitter is not None  # every path that did not make it returned above
    if submitter.errors:
        return {"problems": [f"a start failed: {submitter.errors[0]}"]}
    return {
        "elapsed": float(row[0]) - t_go,
        "cpu": cpu_figures(before, after),
        "latencies": submitter.latencies,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One timed run in a database of its own; its figures, or ``ok`` False with ``problems``."""
    pg = Postgres(args.database_url, keep=False)
    result: dict[str, Any] = {"per": args.per, "ok": False, "probe_ms_before": probe_ms()}
    try:
        create_table(pg.url)
        with connect(pg.url) as conn:
            result["synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
        pg.wait_no_backends()
        xact_before = pg.xact_commit()
        raw = drain(args, pg)
        if "problems" in raw:
            result["problems"] = raw["problems"]
            return result
        problems = verify(pg.url, args.instances, args.steps)
        pg.wait_no_backends()
        xact = pg.xact_commit() - xact_before
    finally:
        pg.close()
    if problems:
        result["problems"] = problems
        return result
    if raw["elapsed"] <= 0:
        result["problems"] = ["the last instance finished before the clock started: clocks disagree"]
        return result
    lat, n = raw["latencies"], args.instances
    result.update(
        ok=True,
        instances=n,
        elapsed_s=round(raw["elapsed"], 3),
        instances_per_s=round(n / raw["elapsed"], 1),
        start_ms={"p50": round(statistics.median(lat), 2), "p99": round(percentile(lat, 99), 2)},
        cpu_s=raw["cpu"],
        cpu_ms_per_instance=round(raw["cpu"]["total"] * 1000 / n, 2),
        # the count includes the verification's read and the table's creation is before it
        pg_xact_per_instance=round(xact / n, 3),
        probe_ms_after=probe_ms(),
    )
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--per", choices=("step", "instance"), default="step", help="one commit per step, or per instance"
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4, help="worker processes")
    p.add_argument("--concurrency", type=int, default=16, help="threads per worker process")
    p.add_argument("--submit-threads", type=int, default=8)
    p.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("steps", "instances", "workers", "concurrency", "submit_threads"):
        if getattr(args, name) < 1:
            print(f"handwritten: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    result = run(args)
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        cpu = result["cpu_s"]
        print(
            f"hand-written, commit per {args.per}: {result['instances_per_s']} inst/s ({result['elapsed_s']} s), "
            f"start p50 {result['start_ms']['p50']} ms p99 {result['start_ms']['p99']} ms; CPU s: workers "
            f"{cpu['workers']}, pg backends {cpu['postgres_backends']}, driver {cpu['driver']}, other "
            f"{cpu.get('other')}; {result['cpu_ms_per_instance']} CPU ms/inst; {result['pg_xact_per_instance']} "
            f"pg xact/inst; synchronous_commit={result['synchronous_commit']}"
        )
    if not result["ok"]:
        print(f"hand-written, commit per {args.per}: FAILED {result['problems']}", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
