"""The machine's speed at the time of a run: a fixed Python workload, timed.

The benchmark's figures move with the machine (a shared VM's speed changes from hour to hour;
bench/README.md "Round six" saw the same loop take 1.31 s and 1.97 s within twenty minutes), so
each run records how long this loop took before and after its modes. Compare figures across
runs only where the probes agree; compare builds or commits side by side, alternating.
"""

from __future__ import annotations

import time

__all__ = ["ITERATIONS", "probe_ms"]

#: integer additions per timing: about a tenth of a second on a quick core
ITERATIONS = 1_000_000


def _loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def probe_ms(repeats: int = 3) -> float:
    """The fastest of ``repeats`` timings of the loop, in milliseconds (the fastest: a timing
    that another process interrupted says less about the core's speed)."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        _loop(ITERATIONS)
        best = min(best, time.perf_counter() - start)
    return round(1000 * best, 1)
