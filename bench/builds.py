"""The compiled hot paths against the pure ones, end to end (issue #28: "compiled never slower
than pure"): ``wiggle bench --impl cython`` beside ``--impl python``, in alternating pairs.

    python bench/builds.py --rounds 5 --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/builds.py --rounds 5                       # the in-memory store
    python bench/builds.py --rounds 5 --modes LOCAL_SYNC --submit during

Each round runs the drain (``wiggle bench``, 20 steps x 1,000 instances, pre-submitted unless
``--submit during``) in every mode twice, once with the server and the workers on the pure-Python
twins (``WIGGLE_IMPL=python``) and once on the compiled ones (``WIGGLE_IMPL=cython``, which
refuses to start without them), the order flipping each round (wiggle/_bench/pairs.py). A run is
counted only if the server and every worker said they ran the build asked for. Printed per mode:
the medians of inst/s and of CPU per instance (all roles: server, workers, PostgreSQL, driver) of
each build, compiled / pure for both, the paired ratios (the median of each round's own ratio, the
steadier figure here), and in how many rounds the compiled build was the faster and the cheaper.
The twins' own speeds are bench/micro_*.py's; this says whether they pay where users run them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from wiggle._bench.pairs import (
    Run,
    add_arguments,
    alternate,
    compare,
    count_lower,
    dump_json,
    exit_status,
    store_name,
)

VARIANTS = {"pure": ["--impl", "python"], "compiled": ["--impl", "cython"]}
IMPLS = {"pure": "python", "compiled": "cython"}


def ran_as_asked(variant: str, run: Run) -> Run:
    """``run`` unchanged when its server and every worker ran ``variant``'s hot paths; otherwise
    not ok, naming what ran."""
    wanted = IMPLS[variant]
    workers = run.get("worker_impl") or []
    if run.get("server_impl") == wanted and workers and all(w == wanted for w in workers):
        return run
    problem = f"asked for {wanted}, ran server {run.get('server_impl')!r}, workers {workers!r}"
    return {**run, "ok": False, "problems": [problem]}


def summary(runs: dict[str, list[Run]]) -> dict[str, Any]:
    """One mode's figures: medians per build, compiled / pure, paired ratios, rounds won."""
    pure, compiled = runs["pure"], runs["compiled"]
    rate = compare(pure, compiled, "instances_per_s")
    cpu = compare(pure, compiled, "cpu_ms_per_instance", 2)
    faster, rounds = count_lower(compiled, pure, "instances_per_s")  # pure's rate the lower
    cheaper, _ = count_lower(pure, compiled, "cpu_ms_per_instance")  # compiled's CPU the lower
    return {
        "pure": rate["first"],
        "compiled": rate["second"],
        "ratio": rate["ratio"],
        "paired_ratio": rate["paired"],
        "cpu_ms_pure": cpu["first"],
        "cpu_ms_compiled": cpu["second"],
        "cpu_ratio": cpu["ratio"],
        "paired_cpu_ratio": cpu["paired"],
        "rounds": rounds,
        "compiled_faster": faster,
        "compiled_cheaper": cheaper,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p, rounds=5)
    p.add_argument("--submit", choices=("before", "during"), default="before")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    variants = {name: [*extra, "--submit", args.submit] for name, extra in VARIANTS.items()}
    runs = alternate(modes, variants, args, check=ran_as_asked)
    table = {mode: summary(runs[mode]) for mode in modes}
    if args.json:
        dump_json(args, runs, table)
    else:
        print(
            f"medians of {args.rounds} alternating rounds ({store_name(args)}, {args.steps} steps x "
            f"{args.instances}, submit {args.submit}); compiled / pure:"
        )
        print(
            f"  {'mode':<12} {'pure':>8} {'compiled':>9} {'ratio':>6} {'paired':>7}  |  CPU ms/inst "
            f"{'pure':>6} {'compiled':>9} {'ratio':>6} {'paired':>7}  |  compiled faster, cheaper"
        )
        for mode, row in table.items():
            print(
                f"  {mode:<12} {row['pure']!s:>8} {row['compiled']!s:>9} {row['ratio']!s:>6} "
                f"{row['paired_ratio']!s:>7}  |  {row['cpu_ms_pure']!s:>17} {row['cpu_ms_compiled']!s:>9} "
                f"{row['cpu_ratio']!s:>6} {row['paired_cpu_ratio']!s:>7}  |  "
                f"{row['compiled_faster']} and {row['compiled_cheaper']} of {row['rounds']} rounds"
            )
        print(
            "  (inst/s: higher is better; CPU: lower is better; paired: the median of the rounds' own "
            "ratios, a round's two runs being next to each other in time)"
        )
    return exit_status(runs)


if __name__ == "__main__":
    sys.exit(main())
