"""WorkerStats: what a worker did, counted (tests and the benchmark read them)."""

from __future__ import annotations

from collections import Counter

from .._histogram import Histogram

__all__ = ["WorkerStats", "HANDLER_BUCKETS"]

HANDLER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


class WorkerStats:
    """Counters of what this worker did (tests and the benchmark read them)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # RPCs sent, by method
        self.steps = 0  # handler executions
        self.handbacks: Counter[str] = Counter()
        self.local_run_lengths: list[int] = []
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
