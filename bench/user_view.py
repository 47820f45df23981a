"""Issue #28's benchmark in the user's view: Wiggle against a hand-written psycopg loop, alternating.

    python bench/user_view.py --rounds 5 --database-url postgresql://postgres@127.0.0.1:5432/test

Each round runs, one after another on the same PostgreSQL: ``wiggle bench --submit during`` (8
submitting threads of one process calling ``Client.start`` with dict contexts while 4 worker
processes x 16 run 20-step instances; the clock from the first start to the last completion) in
SERVER, LOCAL_SYNC and LOCAL_ASYNC, then the hand-written loop (bench/handwritten.py) committing
per step and per instance, with the same workload, threads and processes. It prints every run,
then the medians and the ratios the issue's targets are stated in:

- LOCAL_ASYNC / hand-written per instance (target >= 2.0)
- LOCAL_SYNC / hand-written per step (target >= 1.0), SERVER / hand-written per step (>= 0.8)
- start latency p50 / p99 per Wiggle mode while the workers run (targets <= 5 ms / <= 25 ms)

Absolute figures on a shared machine move by 2x from day to day; the ratios of one sitting are
what to compare (bench/README.md). ``--json`` prints the whole document instead of the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")
LOOPS = ("step", "instance")
TARGETS = (
    ("LOCAL_ASYNC", "instance", 2.0),
    ("LOCAL_SYNC", "step", 1.0),
    ("SERVER", "step", 0.8),
)


def _wiggle(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "wiggle.cli", "bench", "--modes", mode, "--submit", "during",
        "--submit-threads", str(args.submit_threads), "--steps", str(args.steps),
        "--instances", str(args.instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--database-url", args.database_url,
        "--json", "--no-progress",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"ok": False, "problems": [out.stderr.strip()[-500:] or f"exit {out.returncode}"]}
    result = json.loads(out.stdout)["modes"][0]
    starts = result.get("starts", {}).get("latency_ms", {})
    return {
        "ok": True,
        "instances_per_s": result["instances_per_s"],
        "start_ms": {"p50": starts.get("p50"), "p99": starts.get("p99")},
    }


def _loop(per: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, str(HERE / "handwritten.py"), "--per", per, "--steps", str(args.steps),
        "--instances", str(args.instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--submit-threads", str(args.submit_threads),
        "--database-url", args.database_url, "--json",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0 and not out.stdout.strip():
        return {"ok": False, "problems": [out.stderr.strip()[-500:] or f"exit {out.returncode}"]}
    return dict(json.loads(out.stdout))


def _median(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for r in runs:
        v: Any = r
        for key in path:
            v = v.get(key) if isinstance(v, dict) else None
        if r.get("ok") and v is not None:
            values.append(float(v))
    return round(statistics.median(values), 2) if values else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--submit-threads", type=int, default=8)
    p.add_argument(
        "--database-url",
        default=os.environ.get("WIGGLE_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in (*MODES, *LOOPS)}
    for n in range(1, args.rounds + 1):
        for mode in MODES:
            runs[mode].append(_wiggle(mode, args))
            print(f"round {n} wiggle {mode}: {runs[mode][-1]}", file=sys.stderr, flush=True)
        for per in LOOPS:
            runs[per].append(_loop(per, args))
            print(f"round {n} hand-written per {per}: {runs[per][-1]}", file=sys.stderr, flush=True)
    medians = {k: _median(v, "instances_per_s") for k, v in runs.items()}
    ratios = {
        f"{mode}/{per}": (round(medians[mode] / medians[per], 2) if medians[mode] and medians[per] else None)
        for mode, per, _ in TARGETS
    }
    starts = {m: {q: _median(runs[m], "start_ms", q) for q in ("p50", "p99")} for m in MODES}
    doc = {"settings": vars(args), "runs": runs, "medians": medians, "ratios": ratios, "start_ms": starts}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"medians of {args.rounds} alternating rounds, inst/s:")
        for key, value in medians.items():
            label = f"wiggle {key}" if key in MODES else f"hand-written, commit per {key}"
            print(f"  {label:32} {value}")
        for mode, per, target in TARGETS:
            print(f"  {mode} / per {per}: {ratios[f'{mode}/{per}']} (target >= {target})")
        for mode in MODES:
            print(f"  {mode} start latency p50 {starts[mode]['p50']} ms, p99 {starts[mode]['p99']} ms")
    failed = [k for k, v in runs.items() if not all(r.get("ok") for r in v)]
    if failed:
        print(f"runs that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
