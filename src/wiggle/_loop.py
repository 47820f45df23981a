"""The event loop of the processes Wiggle runs itself: ``wiggle server`` (``WIGGLE_EVENT_LOOP``)
and a worker's blocking ``Worker.run()``, which ``wiggle worker`` uses
(``WorkerOptions.event_loop``, ``WIGGLE_WORKER_EVENT_LOOP``); docs/performance.md#the-server-process.

``run`` runs a coroutine on uvloop (libuv's loop for asyncio) when it is importable and ``auto``
or ``uvloop`` asks for it, else on asyncio's own loop. A server's and a worker's loops run many
short callbacks (gRPC's completions, psycopg's waits on its sockets, the futures of reports and
group commits); uvloop runs them with less CPU (bench/README.md, "Round twenty-eight"). uvloop
comes with the ``uvloop`` extra (and the ``postgres`` one, what a production server installs)
where it has wheels (Linux, macOS). Code that runs Wiggle on its own loop (``await
worker.run_async()``, an embedded server) keeps that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from .errors import InvalidArgument

__all__ = ["EVENT_LOOPS", "check_event_loop", "loop_kind", "run"]

T = TypeVar("T")

#: The values of WIGGLE_EVENT_LOOP and WorkerOptions.event_loop: uvloop where installed (auto),
#: asyncio's loop, or uvloop or nothing.
EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def check_event_loop(name: str, setting: str = "WIGGLE_EVENT_LOOP") -> str:
    """``name`` if it is one of EVENT_LOOPS; else InvalidArgument naming ``setting`` and them."""
    if name not in EVENT_LOOPS:
        raise InvalidArgument(f"{setting} must be auto, asyncio or uvloop, not {name!r}")
    return name


def run(main: Coroutine[Any, Any, T], event_loop: str, setting: str = "WIGGLE_EVENT_LOOP") -> T:
    """Run ``main`` to its end on a new event loop of the kind ``event_loop`` names (EVENT_LOOPS)
    and close it, as ``asyncio.run`` does. ``uvloop`` when uvloop is not installed is
    InvalidArgument naming ``setting`` and the extra that installs it (``main`` never runs)."""
    try:
        check_event_loop(event_loop, setting)
    except InvalidArgument:
        main.close()
        raise
    if event_loop != "asyncio":
        try:
            import uvloop
        except ImportError:
            if event_loop == "uvloop":
                main.close()
                raise InvalidArgument(
                    f"{setting} is uvloop, but uvloop is not installed: "
                    "pip install 'wiggle-workflows[uvloop]' (or pip install uvloop)"
                ) from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def loop_kind() -> str:
    """``"uvloop"`` or ``"asyncio"``: the running loop's kind."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
