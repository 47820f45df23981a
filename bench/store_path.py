"""The PostgreSQL store's own cost per instance, without gRPC: start, claim, AdvanceRun.

    python bench/store_path.py --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/store_path.py --database-url ... --concurrency 16 --profile   # + cProfile, top 30

Runs the instance layer (wiggle/_server/instances.py) in this process on a fresh schema (dropped
afterwards) and a 20-step LOCAL_ASYNC workflow. ``--concurrency`` instances go through
start -> claim -> one final AdvanceRun of all 20 steps at a time; CPU time of this process per
instance, and, with ``--concurrency 1``, per phase. Concurrency 1 is the cost of a transaction
that holds one row of each kind (what a trickle of work costs); higher concurrency lets the group
commits share transactions (bench/README.md, "Round four").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
import uuid

import psycopg
from psycopg import sql

from wiggle._engine.engine import Engine
from wiggle._engine.records import TaskDone
from wiggle._model import ExecutionMode, Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore

STEPS = 20
FLOW = WorkflowDefinition(
    name="store-path",
    start_node="s1",
    nodes=tuple(
        Node(id=f"s{i}", kind=NodeKind.TASK, queue="q", next=f"s{i + 1}" if i < STEPS else "end")
        for i in range(1, STEPS + 1)
    )
    + (Node(id="end", kind=NodeKind.END),),
    execution_mode=ExecutionMode.LOCAL_ASYNC,
)


async def one(layer: Instances, i: int, phases: dict[str, float]) -> None:
    a = time.process_time()
    await layer.start(FLOW.name, "", {"i": i}, "")
    b = time.process_time()
    claimed = await layer.claim(f"w{i}", ["q"], 1)
    c = time.process_time()
    for item in claimed:
        steps = [TaskDone(f"s{k}", {f"s{k}": True}, []) for k in range(1, STEPS + 1)]
        await layer.advance_run(item.token.id, f"w{i}", steps, True, "")
    d = time.process_time()
    phases["start"] += b - a
    phases["claim"] += c - b
    phases["advance"] += d - c


async def run(args: argparse.Namespace, schema: str) -> None:
    store = PostgresStore(args.database_url, schema)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(FLOW)
        phases = dict.fromkeys(("start", "claim", "advance"), 0.0)
        await one(layer, -1, phases)  # warm-up: caches, prepared statements
        phases = dict.fromkeys(phases, 0.0)
        left = list(range(args.instances))

        async def lane() -> None:
            while left:
                await one(layer, left.pop(), phases)

        profile = cProfile.Profile() if args.profile else None
        cpu, wall = time.process_time(), time.perf_counter()
        if profile:
            profile.enable()
        await asyncio.gather(*(lane() for _ in range(args.concurrency)))
        if profile:
            profile.disable()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        n = args.instances
        line = f"{n} instances, concurrency {args.concurrency}: {n / wall:,.0f}/s, CPU {1000 * cpu / n:.3f} ms/instance"
        if args.concurrency == 1:  # phases overlap otherwise
            line += " (" + ", ".join(f"{k} {1000 * v / n:.3f}" for k, v in phases.items()) + ")"
        print(line)
        if profile:
            pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    finally:
        await store.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", required=True)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="print cProfile's top 30 (slows the run)")
    args = p.parse_args()
    schema = f"bench_store_{uuid.uuid4().hex[:8]}"
    try:
        asyncio.run(run(args, schema))
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
