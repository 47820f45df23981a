"""The yardstick of issue #28: what a team could write in an afternoon with psycopg alone.

    python bench/handwritten.py --per step --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/handwritten.py --per instance --json

The same workload as ``wiggle bench --submit during`` (src/wiggle/_bench/worker.py): a linear
S-step workflow whose step i sets ``s<i>`` and increments ``count``, I instances started by T
submitting threads (one connection each, one INSERT per start, autocommit) while W worker
processes of C threads each run them. No engine: one table, one row per instance.

- ``--per step``: a worker thread claims one due row (``FOR UPDATE SKIP LOCKED``), runs one step,
  writes the new context and step number and commits: one transaction per step, as Wiggle's
  SERVER and LOCAL_SYNC modes commit each step.
- ``--per instance``: a worker thread claims a row, runs every step and commits once, as
  LOCAL_ASYNC commits a run.

The clock runs from the first start to the last completion (the database's ``clock_timestamp()``
at each commit), like the user-view harness (bench/user_view.py), which alternates this loop with
``wiggle bench`` and prints the ratios. Every row is checked at the end: a wrong context exits 1.
Idle worker threads sleep 2 ms between empty polls (no LISTEN: the loop stays an afternoon's).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

IDLE_SLEEP = 0.002


def _step(ctx: dict[str, Any], i: int) -> dict[str, Any]:
    ctx[f"s{i}"] = i
    ctx["count"] = ctx.get("count", 0) + 1
    return ctx


def _create(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.runs (id bigint PRIMARY KEY, step int NOT NULL, done boolean NOT NULL "
                "DEFAULT false, ctx jsonb NOT NULL, started_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
                "finished_at timestamptz)"
            ).format(sql.Identifier(schema))
        )
        conn.execute(sql.SQL("CREATE INDEX ON {}.runs (id) WHERE NOT done").format(sql.Identifier(schema)))


def _work(url: str, schema: str, steps: int, per: str, stop: Any) -> None:
    """One worker thread's loop until ``stop`` is set."""
    table = sql.Identifier(schema, "runs")
    claim = sql.SQL(
        "SELECT id, step, ctx FROM {} WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ).format(table)
    write = sql.SQL(
        "UPDATE {} SET step = %s, ctx = %s, done = %s, "
        "finished_at = CASE WHEN %s THEN clock_timestamp() END WHERE id = %s"
    ).format(table)
    with psycopg.connect(url) as conn:
        while not stop.is_set():
            with conn.transaction():
                row = conn.execute(claim).fetchone()
                if row is not None:
                    rid, step, ctx = row
                    last = steps if per == "instance" else step + 1
                    for i in range(step + 1, last + 1):
                        ctx = _step(ctx, i)
                    done = last >= steps
                    conn.execute(write, (last, Jsonb(ctx), done, done, rid))
            if row is None:
                time.sleep(IDLE_SLEEP)


def _worker_process(url: str, schema: str, steps: int, per: str, concurrency: int, stop: Any) -> None:
    threads = [
        threading.Thread(target=_work, args=(url, schema, steps, per, stop), daemon=True)
        for _ in range(concurrency)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _submit(url: str, schema: str, numbers: list[int], latencies: list[float]) -> None:
    insert = sql.SQL("INSERT INTO {} (id, step, ctx) VALUES (%s, 0, %s)").format(
        sql.Identifier(schema, "runs")
    )
    with psycopg.connect(url, autocommit=True) as conn:
        for n in numbers:
            began = time.perf_counter()
            conn.execute(insert, (n, Jsonb({"n": n, "count": 0})))
            latencies.append((time.perf_counter() - began) * 1000)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One timed run; its figures (``ok`` False with ``problems`` when a context is wrong)."""
    schema = f"hw_bench_{os.getpid()}_{int(time.time() * 1000) % 1_000_000}"
    _create(args.database_url, schema)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    workers = [
        ctx.Process(
            target=_worker_process,
            args=(args.database_url, schema, args.steps, args.per, args.concurrency, stop),
        )
        for _ in range(args.workers)
    ]
    try:
        for w in workers:
            w.start()
        time.sleep(1.0)  # the workers connect before the clock starts, as wiggle bench's do
        latencies: list[float] = []
        shares = [list(range(i, args.instances, args.submit_threads)) for i in range(args.submit_threads)]
        submitters = [
            threading.Thread(target=_submit, args=(args.database_url, schema, share, latencies))
            for share in shares
        ]
        for t in submitters:
            t.start()
        for t in submitters:
            t.join()
        table = sql.Identifier(schema, "runs")
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            deadline = time.monotonic() + args.timeout
            while conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE NOT done").format(table)).fetchone()[0]:
                if time.monotonic() > deadline:
                    return {"per": args.per, "ok": False, "problems": [f"not done within {args.timeout} s"]}
                time.sleep(0.02)
            span, wrong = conn.execute(
                sql.SQL(
                    "SELECT extract(epoch FROM max(finished_at) - min(started_at)), "
                    "count(*) FILTER (WHERE (ctx->>'count')::int <> %s OR ctx->>%s IS NULL) FROM {}"
                ).format(table),
                (args.steps, f"s{args.steps}"),
            ).fetchone()
    finally:
        stop.set()
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    if wrong:
        return {"per": args.per, "ok": False, "problems": [f"{wrong} instances with a wrong context"]}
    lat = sorted(latencies)
    return {
        "per": args.per,
        "ok": True,
        "instances": args.instances,
        "elapsed_s": round(float(span), 3),
        "instances_per_s": round(args.instances / float(span), 1),
        "start_ms": {"p50": round(statistics.median(lat), 3), "p99": round(lat[int(len(lat) * 0.99) - 1], 3)},
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--per", choices=("step", "instance"), default="step", help="one commit per step, or per instance"
    )
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4, help="worker processes")
    p.add_argument("--concurrency", type=int, default=16, help="threads per worker process")
    p.add_argument("--submit-threads", type=int, default=8)
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
    elif result["ok"]:
        print(
            f"hand-written, commit per {args.per}: {result['instances_per_s']} inst/s "
            f"({result['elapsed_s']} s), start p50 {result['start_ms']['p50']} ms p99 {result['start_ms']['p99']} ms"
        )
    else:
        print(f"hand-written, commit per {args.per}: FAILED {result['problems']}", file=sys.stderr)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
