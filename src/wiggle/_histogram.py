"""A cumulative-bucket histogram per label tuple, for /metrics of the server and the worker.

Plain counters with no dependency: prometheus-client is needed only to export them. Hot paths
hold on to one label tuple's ``Series`` (``Histogram.labels``) and observe it directly, so a
step builds no label tuple and looks nothing up (wiggle/_server/timings.py, wiggle/_worker/).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

__all__ = ["Histogram", "Series"]


class Series:
    """One label tuple's counts (per bucket, plus +Inf last) and sum of a ``Histogram``."""

    __slots__ = ("buckets", "counts", "sum", "zero")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.zero = bisect_left(buckets, 0.0)  # the bucket of 0 s: ``counts[zero] += 1`` observes one

    def observe(self, seconds: float) -> None:
        """Count one observation."""
        self.counts[bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds


class Histogram:
    """Cumulative-bucket histogram per label tuple (seconds)."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self._series: dict[tuple[str, ...], Series] = {}

    def labels(self, labels: tuple[str, ...]) -> Series:
        """The series of ``labels`` (made on first use); keep it to observe without a lookup."""
        found = self._series.get(labels)
        if found is None:
            found = self._series[labels] = Series(self.buckets)
        return found

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        """Count one observation."""
        found = self._series.get(labels)
        if found is None:
            found = self._series[labels] = Series(self.buckets)
        found.observe(seconds)

    @property
    def counts(self) -> dict[tuple[str, ...], list[int]]:
        """Per label tuple: the count per bucket, plus +Inf last (not cumulative)."""
        return {labels: s.counts for labels, s in self._series.items()}

    @property
    def sums(self) -> dict[tuple[str, ...], float]:
        """Per label tuple: the sum of the observations."""
        return {labels: s.sum for labels, s in self._series.items()}

    def series(self) -> Iterable[tuple[tuple[str, ...], list[tuple[str, int]], float]]:
        """(labels, cumulative buckets as (le, count), sum) per label tuple."""
        for labels in sorted(self._series):
            found = self._series[labels]
            running = 0
            out = []
            for bound, n in zip((*map(str, self.buckets), "+Inf"), found.counts, strict=True):
                running += n
                out.append((bound, running))
            yield labels, out, found.sum
