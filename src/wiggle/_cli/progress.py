"""Progress on stderr for the verbs that take a while: ``--wait`` and ``start --from-file``.

Shown only when stderr is a terminal and ``--json`` is not given: one line, rewritten in place
(carriage return, erase to the end of the line), cleared when the work is done. Piped or
redirected, nothing is written, so scripts see only the result on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from .._status import InstanceStatus

__all__ = ["Progress", "wait_with_progress", "counted"]

#: Seconds between two looks at an instance while ``--wait`` shows progress.
WAIT_SLICE = 0.5


class Progress:
    """One status line on ``stream`` (default stderr), when it is a terminal and not ``--json``."""

    def __init__(self, args: argparse.Namespace, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.on = not getattr(args, "json", False) and bool(isatty and isatty())
        self.shown = False

    def show(self, text: str) -> None:
        if self.on:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _where(info: Any) -> str:
    nodes = sorted({t.node_id for t in info.tokens})
    return f" at {', '.join(nodes)}" if nodes else ""


def wait_with_progress(client: Any, info: Any, args: argparse.Namespace) -> Any:
    """``client.wait(info.instance_id, args.timeout)``, showing the status and the nodes its
    tokens are at while it waits (on a terminal); the final snapshot."""
    progress = Progress(args)
    if not progress.on:
        return client.wait(info.instance_id, timeout=args.timeout)
    began = time.monotonic()
    try:
        while True:
            waited = time.monotonic() - began
            progress.show(
                f"waiting for {info.instance_id}: {info.status}{_where(info)} ({waited:.0f} s of {args.timeout:g})"
            )
            left = args.timeout - waited
            if info.status != InstanceStatus.RUNNING or left <= 0:
                return info
            info = client.wait(info.instance_id, timeout=min(WAIT_SLICE, left))
    finally:
        progress.clear()


def counted(items: list[Any], progress: Progress, what: str) -> Iterator[Any]:
    """Yield ``items``, showing "what: i/N sent" every ``COUNT_EVERY`` items the consumer takes
    (the client takes a chunk's contexts as it builds that chunk's call, after the last reply)."""
    total = len(items)
    for i, item in enumerate(items):
        if i % COUNT_EVERY == 0:
            progress.show(f"{what}: {i}/{total} sent")
        yield item
    progress.show(f"{what}: {total}/{total} sent")


#: How often ``counted`` updates its line (items).
COUNT_EVERY = 100
