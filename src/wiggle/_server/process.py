"""What ``wiggle server`` sets up in its own process: the event loop it runs on
(``WIGGLE_EVENT_LOOP``: wiggle/_loop.py, uvloop where installed) and its garbage collector
(``WIGGLE_GC_THRESHOLD``); docs/performance.md#the-server-process.

CPython runs a young collection after every 700 net allocations of container objects and a full
one, over every object in the process, after every hundred or so of those. A server answering
steps allocates that many in well under a millisecond, and reference counting, not the collector,
frees nearly all of it; the collections found little while costing the server about a tenth of
its CPU, and each full one, 20-30 ms over the modules and tables loaded at start-up, stopped
every call in flight for that long (bench/README.md, "Round twenty-eight"). ``tune_collector``
runs once the server is up: one collection, then ``gc.freeze()`` moves everything alive (modules,
descriptors, the store's statements: objects that live as long as the process) out of every later
collection, and the young generation's threshold goes up. Reference cycles are still collected,
in fewer and larger batches.

Both are set by ``wiggle server``'s process (wiggle/_cli/server.py, app.py ``serve``; each of
``--processes``' children) and the benchmark's server, never by a server embedded in someone
else's process (the test kit, a test), whose loop and collector are its owner's.
"""

from __future__ import annotations

import gc

from .._loop import loop_kind

__all__ = ["describe", "tune_collector"]


def tune_collector(threshold: int) -> bool:
    """Freeze what the process holds now and collect young objects every ``threshold`` net
    allocations (the older generations' thresholds unchanged). 0 leaves the collector as it is.
    Whether it changed anything."""
    if threshold <= 0:
        return False
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(threshold, middle, oldest)
    return True


def describe() -> str:
    """The running loop's kind and the collector's settings, for the server's start-up log."""
    return (
        f"event loop {loop_kind()}; garbage collector: young collections every {gc.get_threshold()[0]} "
        f"allocations, {gc.get_freeze_count()} start-up objects frozen"
    )
