"""Any two configurations of Wiggle side by side: ``wiggle bench`` in alternating pairs.

    python bench/ab.py --variant four=WIGGLE_GROUP_COMMITS=4 --variant one=WIGGLE_GROUP_COMMITS=1 \\
        --submit during --rounds 3 --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/ab.py --variant plain= --variant chained0="--chain-steps 0" --modes SERVER --rounds 3

Each ``--variant NAME=SPEC`` (two of them) names a configuration: SPEC's words of the form
``WIGGLE_...=VALUE`` are set in the environment of that variant's runs (so of its server and
workers: any server or worker setting), the other words are added to its ``wiggle bench``
command line. Each round runs every mode once per variant, the order flipping each round
(wiggle/_bench/pairs.py). Printed per mode: the medians of inst/s, CPU per instance (all roles),
PostgreSQL transactions per instance and, with ``--submit during``, the starts' p50, for each
variant; the second against the first, as medians and paired (the median of the rounds' own
ratios); and in how many rounds the second was the faster and the cheaper. bench/limits.py and
bench/builds.py are two such comparisons with their own checks.
"""

from __future__ import annotations

import argparse
import re
import shlex
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

VARIABLE = re.compile(r"^(WIGGLE_[A-Z0-9_]+)=(.*)$")
FIGURES = (  # (key, heading, digits)
    ("instances_per_s", "inst/s", 1),
    ("cpu_ms_per_instance", "CPU ms/inst", 2),
    ("pg_xact_per_instance", "PG xact/inst", 3),
    ("start_p50_ms", "start p50 ms", 1),
)


def parse_variant(text: str) -> tuple[str, list[str], dict[str, str]]:
    """``NAME=SPEC`` as (name, the bench arguments, the environment's variables)."""
    name, sep, spec = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise argparse.ArgumentTypeError(
            f"--variant takes NAME=SPEC (a name of letters, digits, '_', '.', '-'), got {text!r}"
        )
    arguments: list[str] = []
    env: dict[str, str] = {}
    for word in shlex.split(spec):
        match = VARIABLE.match(word)
        if match:
            env[match.group(1)] = match.group(2)
        else:
            arguments.append(word)
    return name, arguments, env


def summary(first: list[Run], second: list[Run]) -> dict[str, Any]:
    """One mode's figures: each variant's medians, second / first (medians and paired), rounds won."""
    row: dict[str, Any] = {}
    for key, _, digits in FIGURES:
        row[key] = compare(first, second, key, digits)
    faster, rounds = count_lower(second, first, "instances_per_s")  # the first's rate the lower
    cheaper, _ = count_lower(first, second, "cpu_ms_per_instance")
    row.update(rounds=rounds, second_faster=faster, second_cheaper=cheaper)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.add_argument("--variant", type=parse_variant, action="append", required=True, help="NAME=SPEC (two)")
    p.add_argument("--submit", choices=("before", "during"), default="before")
    args = p.parse_args(argv)
    if len(args.variant) != 2 or args.variant[0][0] == args.variant[1][0]:
        p.error("give two --variant options with different names")
    modes = [m for m in args.modes.split(",") if m]
    (a, a_args, a_env), (b, b_args, b_env) = args.variant
    variants = {a: [*a_args, "--submit", args.submit], b: [*b_args, "--submit", args.submit]}
    runs = alternate(modes, variants, args, envs={a: a_env, b: b_env})
    table = {mode: summary(runs[mode][a], runs[mode][b]) for mode in modes}
    if args.json:
        dump_json(args, runs, table, {**vars(args), "variant": [[a, a_args, a_env], [b, b_args, b_env]]})
    else:
        print(
            f"medians of {args.rounds} alternating rounds ({store_name(args)}, {args.steps} steps x {args.instances}, "
            f"submit {args.submit}); {a} -> {b} (ratio {b} / {a}, paired: the median of the rounds' own ratios):"
        )
        for mode, row in table.items():
            print(
                f"  {mode}: {b} faster in {row['second_faster']} and cheaper in {row['second_cheaper']} of {row['rounds']} rounds"
            )
            for key, heading, _ in FIGURES:
                f = row[key]
                if f["first"] is None and f["second"] is None:
                    continue
                print(
                    f"    {heading:<13} {f['first']!s:>9} -> {f['second']!s:<9} ratio {f['ratio']!s:<6} paired {f['paired']}"
                )
    return exit_status(runs)


if __name__ == "__main__":
    sys.exit(main())
