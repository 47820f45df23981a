"""Two variants of ``wiggle bench`` side by side: run in alternating pairs, summed up as ratios.

Used by the scripts that judge one change of configuration by its cost (bench/limits.py: limits
that do not bind; bench/builds.py: the compiled hot paths against the pure ones). Each round runs
every mode once per variant, the variants' order flipping from one round to the next (neither
gains from going second), each run a ``wiggle bench --json`` subprocess. The machine here is
shared and its speed moves by a fifth within a minute (bench/README.md), so besides the medians
of each variant this gives the *paired* figures: the median of each round's own ratio, the two
runs of a round being next to each other in time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._env import child_environment, env_str

__all__ = [
    "MODES",
    "Run",
    "add_arguments",
    "alternate",
    "bench_run",
    "compare",
    "count_lower",
    "dump_json",
    "exit_status",
    "median",
    "paired",
    "store_name",
]

MODES = ("SERVER", "LOCAL_SYNC", "LOCAL_ASYNC")

Run = dict[str, Any]  # one run's figures (bench_run)


def add_arguments(p: argparse.ArgumentParser, rounds: int = 3) -> None:
    """The workload's arguments every pairs script takes (``wiggle bench``'s own names)."""
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--instances", type=int, default=1000)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--database-url", default=env_str("WIGGLE_DATABASE_URL"))
    p.add_argument("--json", action="store_true", help="the whole document on stdout")


def bench_run(
    mode: str, extra: Sequence[str], args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> Run:
    """One ``wiggle bench`` run of ``mode`` with ``extra`` arguments and ``env`` set in its
    environment (so in its server's and workers'): its inst/s, CPU per instance (all roles), that
    CPU in units of the workers' own, PostgreSQL transactions per instance, the starts' p50 when
    they ran during the drain, the hot paths the server and the workers reported they ran
    (``environment``) and the run's settings. ``ok`` is False, with ``problems``, when the run
    failed or did not verify every instance."""
    cmd = [
        sys.executable, "-m", "wiggle.cli", "bench", "--modes", mode, "--steps", str(args.steps),
        "--instances", str(args.instances), "--workers", str(args.workers),
        "--concurrency", str(args.concurrency), "--json", "--no-progress", *extra,
    ]  # fmt: skip
    if args.database_url:
        cmd += ["--database-url", args.database_url]
    out = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=child_environment(**dict(env or {}))
    )
    if out.returncode != 0:
        return {"ok": False, "problems": [out.stderr.strip()[-500:] or f"exit {out.returncode}"]}
    document = json.loads(out.stdout)
    result = document["modes"][0]
    environment = document.get("environment") or {}
    workers = (result.get("cpu_s") or {}).get("workers")
    total = result.get("cpu_ms_per_instance")
    return {
        "ok": bool(result.get("ok")),
        "instances_per_s": result.get("instances_per_s"),
        "cpu_ms_per_instance": total,
        # all roles' CPU in units of the workers' own (a control for the machine's speed of the
        # moment where the workers do the same work in both variants)
        "cpu_per_worker_cpu": round(total / (workers * 1000 / result["instances"]), 3)
        if total and workers
        else None,
        "pg_xact_per_instance": result.get("pg_xact_per_instance"),
        "start_p50_ms": ((result.get("starts") or {}).get("latency_ms") or {}).get("p50")
        if result.get("submit") == "during"
        else None,
        "server_impl": environment.get("server_impl"),
        "worker_impl": environment.get("worker_impl"),
        "settings": document.get("settings") or {},
    }


def alternate(
    modes: Sequence[str],
    variants: Mapping[str, Sequence[str]],
    args: argparse.Namespace,
    check: Callable[[str, Run], Run] | None = None,
    envs: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, dict[str, list[Run]]]:
    """``args.rounds`` rounds of every mode under each of the two ``variants`` (name -> extra
    arguments of ``wiggle bench``; ``envs``: name -> variables set for that variant's runs), in
    the given order in odd rounds and reversed in even ones. ``check(variant, run)`` may mark a
    run not ok (a run that did not run what it was asked to). Each run is logged on stderr as it
    ends."""
    names = list(variants)
    if len(names) != 2:
        raise ValueError(f"two variants are compared, got {names}")
    runs: dict[str, dict[str, list[Run]]] = {m: {v: [] for v in names} for m in modes}
    for n in range(1, args.rounds + 1):
        for mode in modes:
            for variant in names if n % 2 else names[::-1]:
                run = bench_run(mode, variants[variant], args, (envs or {}).get(variant))
                if check is not None and run.get("ok"):
                    run = check(variant, run)
                runs[mode][variant].append(run)
                print(f"round {n} {mode} {variant}: {run}", file=sys.stderr, flush=True)
    return runs


def _usable(run: Run, figure: str) -> bool:
    return bool(run.get("ok")) and bool(run.get(figure))


def median(runs: Sequence[Run], figure: str = "instances_per_s", digits: int = 1) -> float | None:
    """The median of ``figure`` over the runs that succeeded (None: none did)."""
    values = [float(r[figure]) for r in runs if _usable(r, figure)]
    return round(statistics.median(values), digits) if values else None


def paired(first: Sequence[Run], second: Sequence[Run], figure: str) -> float | None:
    """The median of each round's own ratio second / first (a round's two runs are next to each
    other in time: the machine's drift between rounds cancels)."""
    ratios = [
        float(b[figure]) / float(a[figure])
        for a, b in zip(first, second, strict=True)
        if _usable(a, figure) and _usable(b, figure)
    ]
    return round(statistics.median(ratios), 3) if ratios else None


def count_lower(first: Sequence[Run], second: Sequence[Run], figure: str) -> tuple[int, int]:
    """In how many of the rounds where both runs succeeded ``second``'s ``figure`` was lower than
    ``first``'s, and how many such rounds there were."""
    pairs = [
        (float(a[figure]), float(b[figure]))
        for a, b in zip(first, second, strict=True)
        if _usable(a, figure) and _usable(b, figure)
    ]
    return sum(1 for a, b in pairs if b < a), len(pairs)


def exit_status(runs: Mapping[str, Mapping[str, Sequence[Run]]]) -> int:
    """A pairs script's exit status: 1, naming the modes on stderr, if any run of ``alternate``'s
    ``runs`` failed (or did not run what it was asked to); else 0."""
    failed = [
        mode for mode, variants in runs.items() if not all(r.get("ok") for v in variants.values() for r in v)
    ]
    if failed:
        print(f"runs that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def store_name(args: argparse.Namespace) -> str:
    """Where the runs kept their state, for a script's heading."""
    return "PostgreSQL" if args.database_url else "memory"


def dump_json(
    args: argparse.Namespace, runs: Any, table: Any, settings: Mapping[str, Any] | None = None
) -> None:
    """A pairs script's ``--json`` document on stdout: its settings (``vars(args)`` unless given),
    every run, and the table of medians."""
    document = {
        "settings": dict(settings) if settings is not None else vars(args),
        "runs": runs,
        "medians": table,
    }
    print(json.dumps(document, indent=2))


def compare(first: Sequence[Run], second: Sequence[Run], figure: str, digits: int = 1) -> dict[str, Any]:
    """``figure`` of two variants' runs: each one's median, second / first of the medians
    (``ratio``) and the median of the rounds' own ratios (``paired``)."""
    a, b = median(first, figure, digits), median(second, figure, digits)
    return {
        "first": a,
        "second": b,
        "ratio": round(b / a, 3) if a and b else None,
        "paired": paired(first, second, figure),
    }
