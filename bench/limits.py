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
PostgreSQL, driver), a steadier figure on a shared machine than inst/s. "paired" is the median
of the rounds' own ratios (a round's two runs are next to each other in time). "in workers units"
divides each run's CPU per instance by its workers' own: the workers run the same handlers for the
same steps plain or limited, so their CPU follows the machine's speed of the moment (which moves
by a fifth from one minute to the next here) and the quotient keeps what the limits add. The
machine is shared: compare the ratios of one sitting, not absolute figures (bench/README.md).
"""

from __future__ import annotations

import argparse
import sys

from wiggle._bench.pairs import add_arguments, alternate, compare, dump_json, exit_status, paired, store_name

TARGET = 0.90
VARIANTS = {"plain": [], "limits": ["--limits"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    runs = alternate(modes, VARIANTS, args)
    table: dict[str, dict[str, float | None]] = {}
    for mode in modes:
        pair = runs[mode]["plain"], runs[mode]["limits"]
        rate, cpu = compare(*pair, "instances_per_s"), compare(*pair, "cpu_ms_per_instance", 2)
        table[mode] = {
            "plain": rate["first"],
            "limits": rate["second"],
            "ratio": rate["ratio"],
            "paired_ratio": rate["paired"],
            "cpu_ms_plain": cpu["first"],
            "cpu_ms_limits": cpu["second"],
            "cpu_ratio": cpu["ratio"],
            "paired_cpu_ratio": cpu["paired"],
            "paired_cpu_in_workers_units": paired(*pair, "cpu_per_worker_cpu"),
        }
    if args.json:
        dump_json(args, runs, table)
    else:
        print(
            f"medians of {args.rounds} alternating rounds, inst/s ({store_name(args)}, {args.steps} steps x {args.instances}):"
        )
        print(
            f"  {'mode':<12} {'plain':>8} {'limits':>8} {'ratio':>6} {'paired':>7}  |  CPU ms/inst "
            f"{'plain':>6} {'limits':>7} {'ratio':>6} {'paired':>7} {'in workers units':>17}"
        )
        for mode, row in table.items():
            print(
                f"  {mode:<12} {row['plain']!s:>8} {row['limits']!s:>8} {row['ratio']!s:>6} "
                f"{row['paired_ratio']!s:>7}  |  {row['cpu_ms_plain']!s:>17} {row['cpu_ms_limits']!s:>7} "
                f"{row['cpu_ratio']!s:>6} {row['paired_cpu_ratio']!s:>7} {row['paired_cpu_in_workers_units']!s:>17}"
            )
        print(
            f"  (target: inst/s ratio >= {TARGET}; paired: the median of the rounds' own ratios; CPU in workers "
            "units: all roles' CPU over the workers' own, a control for the machine's speed of the moment)"
        )
    return exit_status(runs)


if __name__ == "__main__":
    sys.exit(main())
