"""The benchmark's one error type: a run that cannot produce a trustworthy result."""

from __future__ import annotations

__all__ = ["BenchError"]


class BenchError(Exception):
    """A mode could not produce a trustworthy result (the message says why)."""
