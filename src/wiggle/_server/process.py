"""What ``wiggle server`` sets up in its own process: the event loop it runs on
(``WIGGLE_EVENT_LOOP``) and its garbage collector (``WIGGLE_GC_THRESHOLD``);
docs/performance.md#the-server-process.

**The event loop.** ``run`` runs the server on uvloop (libuv's loop, the ``postgres`` extra
installs it where it has wheels) when it is importable and ``auto`` or ``uvloop`` asks for it, else
on asyncio's own loop. The server's loop is busy with many short callbacks (gRPC completions,
psycopg's waits on its sockets, futures answered by the group commit); uvloop runs them with less
of the server's CPU (bench/README.md, "Round twenty-eight").

**The garbage collector.** CPython runs a young collection after every 700 net allocations of
container objects and a full one, over every object in the process, after every hundred or so of
those. A server answering steps allocates that many in well under a millisecond, and reference
counting, not the collector, frees nearly all of it; the collections found little while costing
the server about a tenth of its CPU, and each full one, 20-30 ms over the modules and tables loaded
at start-up, stopped every call in flight for that long (bench/README.md, "Round twenty-eight").
``tune_collector`` runs once the server is up: one collection, then ``gc.freeze()`` moves
everything alive (modules, descriptors, the store's statements: objects that live as long as the
process) out of every later collection, and the young generation's threshold goes up. Reference
cycles are still collected, in fewer and larger batches.

Both are called by ``wiggle server``'s process (wiggle/_cli/server.py, app.py ``serve``; each of
``--processes``' children) and the benchmark's server, never by a server embedded in someone
else's process (the test kit, a test), whose loop and collector are its owner's.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..errors import InvalidArgument

__all__ = ["EVENT_LOOPS", "check_event_loop", "describe", "run", "tune_collector"]

T = TypeVar("T")

#: WIGGLE_EVENT_LOOP's values: uvloop where installed (auto), asyncio's loop, or uvloop or nothing.
EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def check_event_loop(name: str) -> str:
    """``name`` if it is one of EVENT_LOOPS; else InvalidArgument naming them."""
    if name not in EVENT_LOOPS:
        raise InvalidArgument(f"WIGGLE_EVENT_LOOP must be auto, asyncio or uvloop, not {name!r}")
    return name


def run(main: Coroutine[Any, Any, T], event_loop: str) -> T:
    """Run ``main`` to its end on a new event loop of the kind ``event_loop`` names (EVENT_LOOPS)
    and close it, as ``asyncio.run`` does. ``uvloop`` when uvloop is not installed is
    InvalidArgument naming the extra that installs it (``main`` never runs)."""
    check_event_loop(event_loop)
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                main.close()
                raise InvalidArgument(
                    "WIGGLE_EVENT_LOOP=uvloop, but uvloop is not installed: "
                    "pip install 'wiggle-workflows[postgres]' (or pip install uvloop)"
                ) from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)


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
    loop = asyncio.get_running_loop()
    kind = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    return (
        f"event loop {kind}; garbage collector: young collections every {gc.get_threshold()[0]} "
        f"allocations, {gc.get_freeze_count()} start-up objects frozen"
    )
