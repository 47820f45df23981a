"""WorkerStats: what a worker did, counted (tests and the benchmark read them)."""

from __future__ import annotations

from collections import Counter

__all__ = ["WorkerStats"]


class WorkerStats:
    """Counters of what this worker did (tests and the benchmark read them)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()  # RPCs sent, by method
        self.steps = 0  # handler executions
        self.handbacks: Counter[str] = Counter()
        self.local_run_lengths: list[int] = []
        self.released = 0  # steps given back: no handler for the node (docs/semantics.md#mixed-fleets)
