"""How long the dashboard's pages and API take with a few thousand instances.

    python bench/dashboard_latency.py [--instances 2000] [--database-url postgresql://...]

Starts an embedded server with its HTTP port, starts the instances (no worker: they stay
RUNNING), then requests each path 20 times and prints the median and the slowest answer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time
from typing import Any

import aiohttp

from wiggle import Workflow
from wiggle.testing import EmbeddedServer

PATHS = ("/api/instances", "/api/queues", "/instances", "/api/cluster")


def step(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


async def measure(instances: int, database_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings: dict[str, Any] = {"http_port": port}
    schema = f"wiggle_bench_dash_{os.urandom(3).hex()}"
    if database_url:
        settings.update(database_url=database_url, database_schema=schema)
    flow = Workflow.define("dashboard-bench").step(step).build()
    async with EmbeddedServer(**settings) as server:
        await server.client.register(flow)
        for start in range(0, instances, 500):  # in waves: thousands of calls at once get CANCELLED
            await asyncio.gather(
                *(server.client.start(flow, {"i": i}) for i in range(start, min(start + 500, instances)))
            )
        async with aiohttp.ClientSession() as http:
            for path in PATHS:
                times = []
                for _ in range(20):
                    began = time.perf_counter()
                    async with http.get(f"http://127.0.0.1:{port}{path}") as answer:
                        await answer.read()
                    times.append(time.perf_counter() - began)
                times.sort()
                store = "postgres" if database_url else "memory"
                print(
                    f"{store:<8} {path:<15} median {times[10] * 1000:6.1f} ms   max {times[-1] * 1000:6.1f} ms"
                )
    if database_url:
        import psycopg

        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    asyncio.run(measure(args.instances, args.database_url))


if __name__ == "__main__":
    main()
