"""The worker: pulls steps from the server, runs plain Python functions, reports the results.

A worker never accepts connections: it long-polls ``PollTasks`` for the queues it serves, runs
each claimed step (sync handlers in a thread pool, ``async def`` handlers on the event loop),
heartbeats while a step runs, and reports with ``CompleteTask``/``FailTask`` (SERVER mode) or
``AdvanceRun`` (LOCAL_SYNC / LOCAL_ASYNC: the local-run driver in wiggle/_worker/local_run.py).

Durability: in SERVER and LOCAL_SYNC every step is committed before the next one runs; in
LOCAL_ASYNC a run of steps is committed at its handback (or every ``local_batch_size`` steps,
after a ``.checkpoint()`` step, or every ``flush_interval`` seconds), so an unclean death re-runs
the unflushed steps. ``close()`` drains: a local run stops chaining at its next step boundary and
flushes what it computed, so a rolling deploy loses nothing.

This module is the public face; the parts live in the private package ``wiggle._worker``.
"""

from __future__ import annotations

from ._worker.options import WorkerOptions
from ._worker.stats import WorkerStats
from ._worker.step import Step
from ._worker.worker import Worker

__all__ = ["Worker", "WorkerOptions", "Step", "WorkerStats"]
