"""The stall guard: heartbeats from a thread of its own while a handler holds the event loop.

A sync handler run inline (``WorkerOptions.sync_handlers`` "inline", or "auto" once it was quick
eight times in a row) runs on the worker's event loop, so nothing else of the worker runs until it
returns: not the heartbeats either. A handler that is usually quick and once is not (a network
call that hangs for a while) would then cost every step the worker holds its lease, and a healthy
worker's steps would run again elsewhere. While an inline handler has held the loop for
``STALL_AFTER`` seconds, this thread renews the leases the heartbeat loop would have renewed, over
a blocking channel of its own, and says once which handler holds the loop. The steps still wait
for the loop (the auto policy sends such a handler back to the pool for good: handlers.py).
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from .._rpc import wiggle_pb2 as pb
from .handlers import InlinePolicy
from .heartbeats import Heartbeats

__all__ = ["StallGuard", "STALL_AFTER"]

log = logging.getLogger("wiggle.worker")

#: seconds an inline handler may hold the event loop before this thread heartbeats in its place
STALL_AFTER = 1.0
#: seconds between two looks at the inline handler
LOOK_EVERY = 0.25
#: a heartbeat call's own time limit (seconds)
CALL_TIMEOUT = 10.0


class StallGuard:
    """Heartbeats ``heartbeats``' steps from a thread while ``policy.blocking`` says an inline
    handler holds the loop; ``client()`` makes the blocking client whose stub it calls (once, at
    the first stall: a worker whose handlers never stall never opens it)."""

    def __init__(self, policy: InlinePolicy, heartbeats: Heartbeats, client: Callable[[], Any]) -> None:
        self.policy = policy
        self.heartbeats = heartbeats
        self._make_client = client
        self._client: Any = None
        self._beaten: dict[str, float] = {}  # task id -> monotonic time of this thread's last beat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wiggle-stall-guard", daemon=True)
        self._told: object = None  # the stall already logged (its start), so it is said once
        self.beats = 0  # heartbeats sent from this thread (tests, the worker's stats)

    def start(self) -> None:
        """Start looking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop looking; close the channel it made."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(CALL_TIMEOUT + 1)
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _run(self) -> None:
        while not self._stop.wait(LOOK_EVERY):
            blocking = self.policy.blocking
            if blocking is None:
                continue
            since, fn = blocking
            held = time.perf_counter() - since
            if held < STALL_AFTER:
                continue
            if self._told is not blocking:
                self._told = blocking
                how = (
                    "an async handler that blocks: await asyncio.to_thread(...) for blocking calls, "
                    "or make it a plain def"
                    if inspect.iscoroutinefunction(fn)
                    else "it runs inline"
                )
                log.warning(
                    "handler %s has held the event loop for %.1f s (%s): the worker's "
                    "steps wait for it; heartbeating them from a thread meanwhile",
                    getattr(fn, "__name__", fn),
                    held,
                    how,
                )
            try:
                self._beat_due()
            except Exception:  # noqa: BLE001 (a guard must not die of one bad round)
                log.debug("stall guard round failed", exc_info=True)

    def _beat_due(self) -> None:
        """One round: a heartbeat for each watched step whose interval has passed."""
        now = time.monotonic()
        watched = list(self.heartbeats.watched.items())
        for task_id in [t for t in self._beaten if t not in self.heartbeats.watched]:
            del self._beaten[task_id]
        for task_id, (act, lease, since) in watched:
            last = max(since, self._beaten.get(task_id, 0.0))
            if now - last < self.heartbeats.interval(act, lease) * 0.9:
                continue
            if self._client is None:
                self._client = self._make_client()
            request = pb.HeartbeatTaskRequest(task_id=act.task_id, lease_owner=act.lease_owner)
            try:
                result = self._client.stub.HeartbeatTask(request, timeout=CALL_TIMEOUT)
            except grpc.RpcError as exc:  # the heartbeat loop learns what this means when it runs
                log.debug("heartbeat of %s from the stall guard: %s", task_id, exc.code())
                continue
            self._beaten[task_id] = time.monotonic()
            self.beats += 1
            if lease is not None:
                lease.expires_at = max(lease.expires_at, result.lease_expires_at)
