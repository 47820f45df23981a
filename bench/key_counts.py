"""What a claim of keyed steps costs as RUNNING tokens pile up: the key counts through the partial
index tokens_limit_held, against the same statement without the index's condition written out
(issue #25; wiggle/_storage/postgres/statements.py ``key_held``).

    python bench/key_counts.py --database-url postgresql://postgres@127.0.0.1:5432/test

A schema of its own (dropped at the end) is migrated and filled with ``--running`` RUNNING tokens
(half of them keyed) and 500 keyed READY ones, analyzed. Then the store's first claim statement
(``Queries.claim_one_first``, 16 steps of one queue) runs under its generic plan, prepared once,
in two forms: as the store sends it, and with ``h.limit_key <> ''`` taken out of every count (the
form before migration 0019). The two alternate, ``--reps`` times each per round, each execution in
a transaction rolled back (the claim locks what it reads). It prints the median execution time of
each form per size and the ratio. The machine is shared: compare the two forms of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
import uuid

import psycopg

from wiggle._storage.postgres.migrations import migrate
from wiggle._storage.postgres.statements import Queries

WITHOUT = "h.limit_key <> '' AND "


def _numbered(text: str) -> str:
    count = iter(range(1, 100))
    return re.sub(r"%s", lambda _: f"${next(count)}", text)


def _fill(conn: psycopg.Connection, schema: str, running: int) -> None:
    s = f'"{schema}"'
    conn.execute(f"TRUNCATE {s}.tokens, {s}.instances CASCADE")
    conn.execute(
        f"INSERT INTO {s}.tokens (id, instance_id, node_id, status, kind, queue, limit_key, limit_max, "
        "lease_owner, lease_expires_at) "
        "SELECT 'run' || g, 'i' || g, 'a', 'RUNNING', 'TASK', 'q', "
        "CASE WHEN g %% 2 = 0 THEN 'k' || g ELSE '' END, 1, 'w', 1000 + g FROM generate_series(1, %s) g",
        (running,),
    )
    conn.execute(
        f"INSERT INTO {s}.tokens (id, instance_id, node_id, status, kind, queue, available_at, limit_key, limit_max) "
        "SELECT 'ready' || g, 'j' || g, 'a', 'READY', 'TASK', 'q', g, 'k' || (g * 2 + 1), 1 "
        "FROM generate_series(1, 500) g"
    )
    conn.execute(
        f"INSERT INTO {s}.instances (id, workflow, version, status, context, joins, created_at, updated_at) "
        "SELECT 'j' || g, 'w', 1, 'RUNNING', '\\x'::bytea, '\\x'::bytea, 0, 0 FROM generate_series(1, 500) g"
    )
    conn.execute(f"ANALYZE {s}.tokens")
    conn.execute(f"ANALYZE {s}.instances")


def _time(conn: psycopg.Connection, name: str) -> float:
    conn.execute("BEGIN")
    began = time.perf_counter()
    rows = conn.execute(f"EXECUTE {name}('q', 9e15::bigint, NULL, 16)").fetchall()
    took = time.perf_counter() - began
    conn.execute("ROLLBACK")
    assert len(rows) == 16, rows
    return took * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    p.add_argument("--running", default="500,4000,20000", help="RUNNING tokens, comma-separated sizes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args(argv)
    schema = f"wiggle_bench_{uuid.uuid4().hex[:8]}"
    asyncio.run(migrate(args.database_url, schema))
    text = _numbered(Queries(schema).claim_one_first)
    assert WITHOUT in text, "the claim no longer writes the index's condition out as this script expects"
    try:
        with psycopg.connect(args.database_url, autocommit=True, prepare_threshold=None) as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")
            print(f"{'RUNNING':>8}  {'through the index':>18}  {'without its condition':>22}  ratio")
            for running in (int(n) for n in args.running.split(",")):
                _fill(conn, schema, running)
                conn.execute("DEALLOCATE ALL")
                conn.execute(f"PREPARE with_index AS {text}")
                conn.execute(f"PREPARE without AS {text.replace(WITHOUT, '')}")
                times: dict[str, list[float]] = {"with_index": [], "without": []}
                for r in range(args.rounds):
                    order = ("with_index", "without") if r % 2 == 0 else ("without", "with_index")
                    for _ in range(args.reps):
                        for name in order:
                            times[name].append(_time(conn, name))
                a, b = statistics.median(times["with_index"]), statistics.median(times["without"])
                print(f"{running:>8}  {a:>15.2f} ms  {b:>19.2f} ms  {b / a:5.1f}x")
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
