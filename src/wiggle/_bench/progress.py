"""The progress line the benchmark draws on stderr while it submits and drains."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A carriage-return progress line on stderr."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.shown = False

    def show(self, label: str, done: int, total: int, started: float, unit: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < (0.2 if self.tty else 2.0):
            return
        self.last = now
        frac = min(done / total, 1.0) if total else 1.0
        width = 30
        filled = int(frac * width)
        elapsed = now - started
        rate = done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(
            f"\r{label:<24} [{bar}] {frac * 100:5.1f}% {done}/{total} {unit}  {elapsed:6.1f} s  {rate:8.1f} {unit}/s "
        )
        if not self.tty:
            sys.stderr.write("\n")
        sys.stderr.flush()
        self.shown = True

    def end(self) -> None:
        if self.enabled and self.shown and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()
        self.shown = False
