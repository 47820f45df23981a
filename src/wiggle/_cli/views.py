"""What the ``wiggle`` command prints for an instance's history: a table with headers, tracebacks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TextIO

from .._client.types import HistoryEntry

__all__ = ["when", "print_history"]


def when(ms: int) -> str:
    """A millisecond timestamp as UTC text ("-" for 0)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


#: The outcomes whose ``error`` is a failure's message; other entries (a resume, a cancel's
#: reason, a concurrency slot waited for or begun) use the field for a note.
FAILURE_OUTCOMES = frozenset({"RETRY", "FAILED", "TIMED_OUT"})


def print_history(
    history: Sequence[HistoryEntry], out: TextIO, tracebacks: bool = True, indent: str = "  "
) -> None:
    """One line per entry under a header; a failed attempt's error, then its traceback indented."""
    header = f"{indent}{'ENDED':<24}  {'NODE':<20} {'ATTEMPT':>7} {'OUTCOME':<10} {'TOOK':>8} WORKER"
    print(header, file=out)
    for e in history:
        took = f"{e.ended_at - e.started_at} ms" if e.started_at else ""
        line = (
            f"{indent}{when(e.ended_at):<24}  {e.node_id:<20} {e.attempt:>7} {e.outcome:<10} {took:>8} "
            f"{e.worker_id}"
        )
        if e.child_id:
            line += f"  child: {e.child_id}"
        print(line.rstrip(), file=out)
        if e.error:  # a failure's message, or what an entry of another kind says (a note)
            label = "error" if e.outcome in FAILURE_OUTCOMES else "note"
            print(f"{indent}    {label}: {e.error}", file=out)
        if tracebacks and e.traceback:
            for tb_line in e.traceback.rstrip().splitlines():
                print(f"{indent}    | {tb_line}", file=out)
