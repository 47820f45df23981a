"""What the compiled build can change: the server's own Python per step, without gRPC.

    python bench/layer_cost.py                       # both builds, alternating, 5 rounds each
    python bench/layer_cost.py --rounds 3 --instances 500

Runs the instance layer (wiggle/_server/instances.py) on the in-memory store, in a subprocess per
build (``WIGGLE_IMPL=cython`` / ``python``, alternating), through the same 20-step linear workflow
as ``wiggle bench``: SERVER mode as claim + CompleteTask (a context diff) per step, LOCAL_SYNC as
one AdvanceRun of one step per step. Prints the CPU time per step of each build (median of the
rounds) and their ratio. This is the part of a step's server cost written in Wiggle's Python (the
engine, the store, the instance layer); ``wiggle bench``'s CPU per instance adds gRPC, asyncio
and the workers (bench/README.md, "Round six").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from wiggle import _fast
from wiggle._bench.probe import probe_ms
from wiggle._bench.worker import blueprint
from wiggle._engine.engine import Engine
from wiggle._engine.records import TaskDone
from wiggle._model import ExecutionMode
from wiggle._server.instances import Instances
from wiggle._storage.memory import MemoryStore

STEPS = 20
MODES = ("SERVER", "LOCAL_SYNC")


async def _measure(mode_name: str, instances: int, lanes: int) -> float:
    """CPU µs per step of ``instances`` instances run through the layer, ``lanes`` at a time."""
    mode = ExecutionMode[mode_name]
    flow = blueprint(mode_name, STEPS).definition  # wiggle bench's workflow
    queue = (
        flow.nodes[0].queue or flow.name
    )  # a node without a queue runs on the workflow's (LoadedDefinition.queue_of)
    layer = Instances(MemoryStore(), Engine())
    await layer.register(flow)

    async def one(i: int) -> None:
        owner = f"w{i % 4}"
        await layer.start(flow.name, "", {"i": i}, "")
        (item,) = await layer.claim(owner, [queue], 1)
        token_id = item.token.id
        for k in range(1, STEPS + 1):
            if mode is ExecutionMode.SERVER:
                status = await layer.complete(token_id, owner, None, None, diff=({f"s{k}": True}, []))
                if k < STEPS:
                    (item,) = await layer.claim(owner, [queue], 1)
                    token_id = item.token.id
            else:
                step = TaskDone(f"s{k}", {f"s{k}": True}, [])
                status = (await layer.advance_run(token_id, owner, [step], k == STEPS, "")).instance_status
        if status != "COMPLETED":  # a run that went wrong measures the wrong thing
            raise SystemExit(f"instance {i} ended {status}, not COMPLETED")

    async def lane(left: list[int]) -> None:
        while left:
            await one(left.pop())

    await one(-1)  # warm-up
    left = list(range(instances))
    cpu = time.process_time()
    await asyncio.gather(*(lane(left) for _ in range(lanes)))
    cpu = time.process_time() - cpu
    return 1e6 * cpu / (instances * STEPS)


def _child(args: argparse.Namespace) -> None:
    result = {m: asyncio.run(_measure(m, args.instances, args.lanes)) for m in MODES}
    print(json.dumps({"impl": _fast.IMPL, "us_per_step": result}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--lanes", type=int, default=16, help="instances in flight at once")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--builds", default="cython,python", help="WIGGLE_IMPL values to run, in turn")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args)
        return
    builds = [b.strip() for b in args.builds.split(",") if b.strip()]
    if not builds or any(b not in ("cython", "python") for b in builds):
        p.error(f"--builds {args.builds!r}: name cython, python or both")
    runs: dict[str, dict[str, list[float]]] = {b: {m: [] for m in MODES} for b in builds}
    before = probe_ms()
    for _ in range(args.rounds):
        for build in runs:
            env = dict(os.environ, WIGGLE_IMPL=build)
            argv = [
                sys.executable,
                __file__,
                "--child",
                "--instances",
                str(args.instances),
                "--lanes",
                str(args.lanes),
            ]
            out = json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)
            if out["impl"] != build:
                sys.exit(
                    f"asked for WIGGLE_IMPL={build}, the child ran {out['impl']} (is the build compiled?)"
                )
            for m in MODES:
                runs[build][m].append(out["us_per_step"][m])
    names = {"cython": "compiled µs/step", "python": "pure µs/step"}
    both = len(runs) == 2
    print(
        f"{'mode':<12}"
        + "".join(f" {names[b]:>17}" for b in runs)
        + (f" {'pure/compiled':>14}" if both else "")
    )
    for m in MODES:
        med = {b: statistics.median(runs[b][m]) for b in runs}
        line = f"{m:<12}" + "".join(f" {med[b]:>17.1f}" for b in runs)
        if both:
            line += f" {med['python'] / med['cython']:>14.2f}"
        print(line)
    print(
        f"({args.rounds} rounds, medians; {args.instances} instances × {STEPS} steps, {args.lanes} in flight)"
    )
    print(f"machine probe: {before:.1f} ms before, {probe_ms():.1f} ms after (wiggle/_bench/probe.py)")


if __name__ == "__main__":
    main()
