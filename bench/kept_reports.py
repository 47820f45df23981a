"""The PostgreSQL store's cost of one LOCAL_SYNC report on a kept state, without gRPC.

    python bench/kept_reports.py --database-url postgresql://postgres@127.0.0.1:5432/test
    PYTHONPATH=/tmp/base/src python bench/kept_reports.py --database-url ...   # another build

Runs the instance layer (wiggle/_server/instances.py) in this process on a fresh schema (dropped
afterwards): ``--runs`` instances of a ``--steps``-step LOCAL_SYNC workflow, one after another,
each claimed once and then reported one step at a time (``advance_run``), as a worker's local run
does. Every report after an instance's first runs on the state this server kept of it
(wiggle/_storage/postgres/state_cache.py). Printed: this process's CPU per report, the median
wall time of the group commit (``GroupCommit._commit_group``: the connection held), and the
share of reports that ran on a kept state. One process, one report at a time: what a quiet
server spends on each step of a local run, and none of the machine's other work.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import psycopg
from psycopg import sql

from wiggle._engine.engine import Engine
from wiggle._engine.records import ContextSet
from wiggle._model import ExecutionMode, Node, NodeKind, WorkflowDefinition
from wiggle._server.instances import Instances
from wiggle._storage.postgres import PostgresStore, group_commit


def linear(steps: int) -> WorkflowDefinition:
    ids = [f"s{i}" for i in range(steps)]
    nodes = [
        Node(id=ids[i], kind=NodeKind.TASK, next=ids[i + 1] if i + 1 < steps else "end") for i in range(steps)
    ]
    definition = WorkflowDefinition(
        name="kept", start_node=ids[0], nodes=(*nodes, Node(id="end", kind=NodeKind.END))
    )
    return msgspec.structs.replace(definition, execution_mode=ExecutionMode.LOCAL_SYNC)


def timed(spans: list[float], fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            spans.append(time.perf_counter() - started)

    return wrapper


async def run(args: argparse.Namespace) -> dict[str, float]:
    schema = f"bench_kept_{uuid.uuid4().hex[:8]}"
    spans: list[float] = []
    group_commit.GroupCommit._commit_group = timed(spans, group_commit.GroupCommit._commit_group)  # type: ignore[method-assign]
    store = PostgresStore(args.database_url, schema, pool_size=3)
    await store.open()
    try:
        layer = Instances(store, Engine())
        await layer.register(linear(args.steps))
        cache = store.group.cache
        assert cache is not None
        cpu = time.process_time()
        for _ in range(args.runs):
            await layer.start("kept", "", {"n": 0}, "")
            (claimed,) = await layer.claim("w", ["kept"], 1)
            for i in range(args.steps - 1):
                await layer.advance_run(claimed.token.id, "w", [ContextSet(f"s{i}", {"n": i})], False, "")
        cpu = time.process_time() - cpu
        reports = args.runs * (args.steps - 1)
        return {
            "reports": reports,
            "cpu_ms_per_report": round(cpu * 1000 / reports, 3),
            "group_commit_p50_ms": round(statistics.median(spans) * 1000, 3),
            "kept_share": round(cache.hits / reports, 3),
        }
    finally:
        await store.close()
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--runs", type=int, default=3, help="instances, one after another")
    parser.add_argument("--steps", type=int, default=401, help="steps of each (all but the last reported)")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    for name, value in figures.items():
        print(f"{name:24} {value}")


if __name__ == "__main__":
    main()
