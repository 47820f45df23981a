"""A for_each whose body is a one-step sub-workflow, on PostgreSQL: how fast the children start.

    python bench/subworkflow_fanout.py --items 1000 --database-url postgresql://postgres@127.0.0.1:5432/postgres

Each child is started by the server's clock duties (wiggle/_server/clock_duties.py, docs/semantics.md
#sub-workflows), so the figure is theirs: children per second from the parent's start to its end,
with an in-process worker running the children's step and a for_each concurrency of 500. The
benchmark makes a database of its own beside the one named (dropped after) and checks every
result. An outside trial measured 70-95 children a second before the clock duties ran more actions
at once (bench/README.md, round thirty-nine).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import psycopg

from wiggle import Workflow
from wiggle._server.config import ServerConfig
from wiggle.testing import EmbeddedServer
from wiggle.worker import WorkerOptions


def work(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "doubled": ctx["item"] * 2}


CHILD = Workflow.define("fanout_child").step(work).build()
PARENT = (
    Workflow.define("fanout_parent")
    .for_each(
        "items", lambda b: b.sub_workflow("child", CHILD, result_key="out"), output_key="out", concurrency=500
    )
    .build()
)


def _database(url: str, name: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{name}"


async def run(items: int, url: str) -> float:
    name = "wiggle_fanout_" + uuid.uuid4().hex[:8]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        config = ServerConfig(port=0, database_url=_database(url, name))
        async with EmbeddedServer(config) as server:
            await server.client.register(CHILD)
            await server.client.register(PARENT)
            async with server.worker([CHILD, PARENT], WorkerOptions(concurrency=32)):
                began = time.perf_counter()
                info = await server.client.start(PARENT, {"items": list(range(items))})
                done = await server.client.wait(info.instance_id, timeout=600)
                took = time.perf_counter() - began
        results = done.context["results"]
        wrong = [i for i, r in enumerate(results) if r["doubled"] != 2 * i]
        if done.status != "COMPLETED" or len(results) != items or wrong:
            raise SystemExit(f"wrong result: {done.status}, {len(results)} results, wrong at {wrong[:5]}")
        return took
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    for n in range(1, args.rounds + 1):
        took = asyncio.run(run(args.items, args.database_url))
        print(f"round {n}: {args.items} children in {took:.2f} s = {args.items / took:.0f} children/s")


if __name__ == "__main__":
    main()
