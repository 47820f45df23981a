"""A clock a test sets by hand: ``clock()`` answers ``clock.at`` (milliseconds or seconds, as the
code under test reads its clock)."""

from __future__ import annotations


class ManualClock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at
