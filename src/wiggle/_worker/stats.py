"""WorkerStats: what a worker did, counted (tests and the benchmark read them)."""

from __future__ import annotations

from collections import Counter

from .._histogram import Histogram, Series

__all__ = ["WorkerStats", "RunLengths", "HANDLER_BUCKETS", "RUN_LENGTH_BUCKETS"]

HANDLER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
RUN_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 1000)


class RunLengths:
    """Steps per local run, counted per bucket of ``RUN_LENGTH_BUCKETS`` with their count, sum and
    longest: never kept one by one (a list of every run's length grew by one entry per local run
    for the worker's whole life, and each /metrics scrape walked it nine times)."""

    __slots__ = ("series", "count", "longest")

    def __init__(self) -> None:
        self.series = Series(RUN_LENGTH_BUCKETS)
        self.count = 0
        self.longest = 0

    def observe(self, steps: int) -> None:
        self.series.observe(steps)
        self.count += 1
        if steps > self.longest:
            self.longest = steps

    @property
    def steps(self) -> int:
        """The steps of every local run together."""
        return int(self.series.sum)


class WorkerStats:
    """Counters of what this worker did (tests and the benchmark read them)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # RPCs sent, by method
        self.steps = 0  # handler executions
        self.handbacks: Counter[str] = Counter()
        self.local_runs = RunLengths()  # steps per local run (wiggle_worker_local_run_steps)
        self.released = 0  # steps given back: no handler for the node (docs/semantics.md#mixed-fleets)
        self.chained = 0  # steps taken from a report's answer, not polled for (WorkerOptions.chain_steps)
        # for the worker's optional /metrics (wiggle/_worker/metrics.py)
        self.in_flight = 0  # steps or local runs executing now (slots in use)
        self.completed = 0  # handler runs that returned (plain ints: counted on every step)
        self.failed = 0  # handler runs that raised or returned something unusable
        self.handler_seconds = Histogram(HANDLER_BUCKETS)  # (workflow,)
        self.report_seconds = Histogram(HANDLER_BUCKETS)  # (rpc,)

    @property
    def outcomes(self) -> Counter[str]:
        """Handler runs by outcome: completed | failed."""
        return Counter({"completed": self.completed, "failed": self.failed})
