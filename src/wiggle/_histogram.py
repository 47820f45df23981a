"""A cumulative-bucket histogram per label tuple, for /metrics of the server and the worker.

Plain counters with no dependency: prometheus-client is needed only to export them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

__all__ = ["Histogram"]


class Histogram:
    """Cumulative-bucket histogram per label tuple (seconds)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts: dict[tuple[str, ...], list[int]] = {}  # per bucket, plus +Inf last
        self.sums: dict[tuple[str, ...], float] = {}

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        """Count one observation."""
        counts = self.counts.get(labels)
        if counts is None:
            counts = self.counts[labels] = [0] * (len(self.buckets) + 1)
            self.sums[labels] = 0.0
        counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sums[labels] += seconds

    def series(self) -> Iterable[tuple[tuple[str, ...], list[tuple[str, int]], float]]:
        """(labels, cumulative buckets as (le, count), sum) per label tuple."""
        for labels in sorted(self.counts):
            running = 0
            out = []
            for bound, n in zip((*map(str, self.buckets), "+Inf"), self.counts[labels], strict=True):
                running += n
                out.append((bound, running))
            yield labels, out, self.sums[labels]
