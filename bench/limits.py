"""The cost of limits that do not bind (issue #25): ``wiggle bench`` with and without ``--limits``.

    python bench/limits.py --rounds 3 --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/limits.py --rounds 3                       # the in-memory store

Each round runs the 20-step x 1,000-instance drain (``wiggle bench``, pre-submitted) in SERVER,
LOCAL_SYNC and LOCAL_ASYNC twice, plain and with ``--limits``, in an order that flips each round
(plain first in odd rounds, limited first in even ones: neither gains from going second). With
``--limits``, step s1 is limited to one attempt at a time per instance (``Limit(key="n",
max=1)``: every claim of s1 takes and counts its key) and the queue has a rate of 1,000,000
claims/s (on PostgreSQL taken in blocks of moments, wiggle/_storage/postgres/rate_blocks.py,
which each claim spends from). Neither binds; what is left is their cost. It prints every run, the
medians side by side and the ratio limited / plain per mode (target: at least 0.90, i.e. at most
10% fewer inst/s), and beside them the medians of CPU per instance (all roles: server, workers,
PostgreSQL, driver), a steadier figure on a shared machine than inst/s. The machine is shared:
compare the ratios of one sitting, not absolute figures (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")
TARGET = 0.90


def _bench(mode: str, limits: bool, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "wiggle.cli", "bench", "--modes", mode, "--steps", str(args.steps),
        "--instances", str(args.instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--json", "--no-progress",
    ]  # fmt: skip
    if args.database_url:
        cmd += ["--database-url", args.database_url]
    if limits:
        cmd.append("--limits")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"ok": False, "problems": [out.stderr.strip()[-500:] or f"exit {out.returncode}"]}
    result = json.loads(out.stdout)["modes"][0]
    return {
        "ok": bool(result.get("ok")),
        "instances_per_s": result.get("instances_per_s"),
        "cpu_ms_per_instance": result.get("cpu_ms_per_instance"),
    }


def _median(runs: list[dict[str, Any]], figure: str = "instances_per_s", digits: int = 1) -> float | None:
    values = [float(r[figure]) for r in runs if r.get("ok") and r.get(figure)]
    return round(statistics.median(values), digits) if values else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--database-url", default=os.environ.get("WIGGLE_DATABASE_URL", ""))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"plain": [], "limits": []} for m in modes}
    for n in range(1, args.rounds + 1):
        for mode in modes:
            for variant in ("plain", "limits") if n % 2 else ("limits", "plain"):
                runs[mode][variant].append(_bench(mode, variant == "limits", args))
                print(f"round {n} {mode} {variant}: {runs[mode][variant][-1]}", file=sys.stderr, flush=True)
    table: dict[str, dict[str, float | None]] = {}
    for mode in modes:
        plain, limited = _median(runs[mode]["plain"]), _median(runs[mode]["limits"])
        ratio = round(limited / plain, 3) if plain and limited else None
        cpu_plain = _median(runs[mode]["plain"], "cpu_ms_per_instance", 2)
        cpu_limited = _median(runs[mode]["limits"], "cpu_ms_per_instance", 2)
        cpu_ratio = round(cpu_limited / cpu_plain, 3) if cpu_plain and cpu_limited else None
        table[mode] = {
            "plain": plain,
            "limits": limited,
            "ratio": ratio,
            "cpu_ms_plain": cpu_plain,
            "cpu_ms_limits": cpu_limited,
            "cpu_ratio": cpu_ratio,
        }
    store = "PostgreSQL" if args.database_url else "memory"
    if args.json:
        print(json.dumps({"settings": vars(args), "runs": runs, "medians": table}, indent=2))
    else:
        print(
            f"medians of {args.rounds} alternating rounds, inst/s ({store}, {args.steps} steps x {args.instances}):"
        )
        print(
            f"  {'mode':<12} {'plain':>10} {'limits':>10} {'ratio':>7}  (target >= {TARGET})"
            f"   CPU ms/inst: {'plain':>6} {'limits':>7} {'ratio':>6}"
        )
        for mode, row in table.items():
            print(
                f"  {mode:<12} {row['plain']!s:>10} {row['limits']!s:>10} {row['ratio']!s:>7}"
                f"                   {row['cpu_ms_plain']!s:>13} {row['cpu_ms_limits']!s:>7} {row['cpu_ratio']!s:>6}"
            )
    failed = [m for m in modes if not all(r.get("ok") for v in runs[m].values() for r in v)]
    if failed:
        print(f"runs that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
