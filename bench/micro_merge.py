"""pyperf micro-benchmarks of context merge: diff, apply_diff, fold_join.

    python bench/micro_merge.py --impl cython -o merge-cython.json
    python bench/micro_merge.py --impl python -o merge-python.json
    python bench/micro_merge.py --impl naive  -o merge-naive.json
    python -m pyperf compare_to merge-python.json merge-cython.json merge-naive.json --table

``--impl python|cython`` picks the twin through the selector (``WIGGLE_IMPL``, set before
``wiggle._fast`` is imported, in every pyperf worker); ``naive`` is the straightforward code one
would write without thinking about speed: JSON text comparisons and ``copy.deepcopy``.
Inputs are realistic: a 20-key context of mixed JSON values, a step that changes a few keys.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyperf

IMPLS = ("python", "cython", "naive")


def add_cmdline_args(cmd: list[str], args: Any) -> None:
    cmd.extend(("--impl", args.impl))


# naive baseline ---------------------------------------------------------------------------------


class NaiveJoinConflict(Exception):
    pass


def naive_diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    changed = {
        k: copy.deepcopy(v)
        for k, v in after.items()
        if k not in before or json.dumps(before[k], sort_keys=True) != json.dumps(v, sort_keys=True)
    }
    return changed, [k for k in before if k not in after]


def naive_apply_diff(context: dict[str, Any], changed: dict[str, Any], removed: list[str]) -> dict[str, Any]:
    result = copy.deepcopy(context)
    for key in removed:
        result.pop(key, None)
    result.update(copy.deepcopy(changed))
    return result


def naive_fold_join(base: dict[str, Any], branches: list[dict[str, Any]]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    owner: dict[str, int] = {}
    for index, branch in enumerate(branches):
        changed, removed = naive_diff(base, branch)
        for key in [*changed, *removed]:
            if key in owner:
                raise NaiveJoinConflict(key, owner[key], index)
            owner[key] = index
        result = naive_apply_diff(result, changed, removed)
    return result


# inputs -----------------------------------------------------------------------------------------


def context20() -> dict[str, Any]:
    """A 20-key context as a worker sees one: ids, amounts, flags, a few nested objects."""
    return {
        "order_id": "ord-2026-11-29-000042",
        "customer": {"id": "cus-981", "tier": "gold", "email": "a@example.invalid"},
        "amount": 1299.5,
        "currency": "EUR",
        "items": [{"sku": "A-1", "qty": 2, "price": 99.0}, {"sku": "B-7", "qty": 1, "price": 1101.5}],
        "paid": False,
        "attempts": 0,
        "warehouse": "w-3",
        "reserved": True,
        "coupon": None,
        "shipping": {"method": "express", "address": {"city": "Lyon", "zip": "69002"}},
        "notes": "leave at the door",
        "risk_score": 0.12,
        "created_at": "2026-11-29T10:00:00Z",
        "tags": ["new", "web"],
        "invoice_id": None,
        "retries": {"charge": 0, "ship": 0},
        "locale": "fr-FR",
        "priority": 3,
        "source": "checkout",
    }


def step_result(before: dict[str, Any], i: int) -> dict[str, Any]:
    """What a step hands back: a shallow copy with a few keys set (a realistic handler)."""
    after = dict(before)
    after["attempts"] = i + 1
    after["paid"] = bool(i % 2)
    after[f"step_{i}_done"] = True
    return after


def bench_merge(runner: pyperf.Runner, merge: dict[str, Callable[..., Any]]) -> None:
    diff, apply_diff, fold_join = merge["diff"], merge["apply_diff"], merge["fold_join"]
    before = context20()
    after = step_result(before, 0)
    # The same values as fresh objects (a context decoded from JSON): a real value comparison.
    decoded = json.loads(json.dumps(after))
    changed, removed = diff(before, after)
    branches = [dict(before, **{f"branch_{b}": b, f"result_{b}": {"ok": True}}) for b in range(3)]

    def loop(fn: Callable[..., Any], *args: Any) -> Callable[[int], float]:
        def timed(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                fn(*args)
            return time.perf_counter() - t0

        return timed

    runner.bench_time_func("merge.diff[20 keys, shared values]", loop(diff, before, after))
    runner.bench_time_func("merge.diff[20 keys, decoded values]", loop(diff, before, decoded))
    runner.bench_time_func("merge.apply_diff[20 keys]", loop(apply_diff, before, changed, removed))
    runner.bench_time_func("merge.fold_join[20 keys, 3 branches]", loop(fold_join, before, branches))


def main() -> None:
    runner = pyperf.Runner(add_cmdline_args=add_cmdline_args)
    runner.argparser.add_argument(
        "--impl", choices=IMPLS, default="cython", help="which implementation to time"
    )
    args = runner.parse_args()
    runner.metadata["wiggle_impl"] = args.impl
    merge: dict[str, Callable[..., Any]]
    if args.impl == "naive":
        merge = {
            "diff": naive_diff,
            "apply_diff": naive_apply_diff,
            "fold_join": naive_fold_join,
        }
    else:
        os.environ["WIGGLE_IMPL"] = args.impl  # read once, by the import below
        import wiggle._fast as fast

        if fast.IMPL != args.impl:
            raise SystemExit(
                f"asked for {args.impl} but wiggle._fast.IMPL is {fast.IMPL}: {fast.IMPL_REASON}"
            )
        merge = {
            "diff": fast.diff,
            "apply_diff": fast.apply_diff,
            "fold_join": fast.fold_join,
        }
    bench_merge(runner, merge)


if __name__ == "__main__":
    main()
