"""pyperf micro-benchmarks of step-batch serialization: encode_batch and decode_batch.

    python bench/micro_batch.py --impl cython -o batch-cython.json
    python bench/micro_batch.py --impl python -o batch-python.json
    python bench/micro_batch.py --impl naive  -o batch-naive.json
    python -m pyperf compare_to batch-python.json batch-cython.json batch-naive.json --table

``--impl python|cython`` picks the twin through the selector (``WIGGLE_IMPL``); ``naive`` is the
standard library's ``json`` plus the same validation written plainly.
The batch is a 64-step local run: task diffs of a few keys, some predicates, one failure.
"""

from __future__ import annotations

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


def naive_encode(steps: list[tuple[Any, ...]]) -> bytes:
    return json.dumps(steps, separators=(",", ":"), ensure_ascii=False).encode()


def naive_decode(data: bytes) -> list[tuple[Any, ...]]:
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"steps_batch is not valid JSON: {exc}") from None
    if not isinstance(raw, list):
        raise ValueError("steps_batch must be a JSON array")
    out: list[tuple[Any, ...]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, list) or len(item) < 3 or not isinstance(item[1], str):
            raise ValueError(f"steps_batch[{index}] must be [kind, node_id, ...]")
        kind = item[0]
        if kind == "T" and len(item) == 4 and isinstance(item[2], dict) and isinstance(item[3], list):
            if not all(isinstance(key, str) for key in item[3]):
                raise ValueError(f"steps_batch[{index}] (T): removed keys must be strings")
        elif kind == "P" and len(item) == 3 and isinstance(item[2], bool):
            pass
        elif kind == "F" and len(item) == 4 and isinstance(item[2], str) and isinstance(item[3], bool):
            pass
        else:
            raise ValueError(f"steps_batch[{index}] is malformed")
        out.append(tuple(item))
    return out


# inputs -----------------------------------------------------------------------------------------


def local_run(steps: int = 64) -> list[tuple[Any, ...]]:
    """A realistic local run: mostly task diffs of 2-4 keys, a predicate every 8 steps, one failure."""
    out: list[tuple[Any, ...]] = []
    for i in range(steps - 1):
        if i % 8 == 7:
            out.append(("P", f"check_{i}", i % 16 == 7))
        else:
            changed: dict[str, Any] = {"attempts": i % 3, f"step_{i}_done": True, "last_node": f"task_{i}"}
            if i % 4 == 0:
                changed["totals"] = {"amount": 12.5 * i, "items": [i, i + 1]}
            out.append(("T", f"task_{i}", changed, ["scratch"] if i % 10 == 0 else []))
    out.append(("F", "charge", "PaymentDeclined: card ending 4242 was declined", True))
    return out


def bench_batch(
    runner: pyperf.Runner,
    encode: Callable[..., bytes],
    decode: Callable[..., Any],
    parse: Callable[..., Any],
    steps: list[Any],
) -> None:
    """Time encode and decode of ``steps`` (the twins: step records; naive: tuples, same bytes)."""
    data = encode(steps)

    def loop(fn: Callable[..., Any], arg: Any) -> Callable[[int], float]:
        def timed(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                fn(arg)
            return time.perf_counter() - t0

        return timed

    runner.bench_time_func("batch.encode[64 steps]", loop(encode, steps))
    runner.bench_time_func("batch.decode[64 steps]", loop(decode, data))
    # The JSON parse alone, untyped, without validation. The twins decode a valid batch with one
    # typed msgspec call straight into step records, which may beat this floor.
    runner.bench_time_func("batch.parse-only[64 steps]", loop(parse, data))


def main() -> None:
    runner = pyperf.Runner(add_cmdline_args=add_cmdline_args)
    runner.argparser.add_argument(
        "--impl", choices=IMPLS, default="cython", help="which implementation to time"
    )
    args = runner.parse_args()
    runner.metadata["wiggle_impl"] = args.impl
    if args.impl == "naive":
        bench_batch(runner, naive_encode, naive_decode, json.loads, local_run())
        return
    os.environ["WIGGLE_IMPL"] = args.impl  # read once, by the import below
    import wiggle._fast as fast

    if fast.IMPL != args.impl:
        raise SystemExit(f"asked for {args.impl} but wiggle._fast.IMPL is {fast.IMPL}: {fast.IMPL_REASON}")
    import msgspec

    # The same run as step records (their array form is the tuples' JSON, byte for byte).
    records = fast.decode_batch(naive_encode(local_run()))
    bench_batch(runner, fast.encode_batch, fast.decode_batch, msgspec.json.Decoder().decode, records)


if __name__ == "__main__":
    main()
