"""Sending a step's report: retried while the server is away, dropped when it refuses.

A refusal (FAILED_PRECONDITION, NOT_FOUND, ...) means the instance moved on without this step
(cancelled, finished, or the lease was lost): the report is logged and dropped, and the caller
stops. UNAVAILABLE and DEADLINE_EXCEEDED mean the server restarts or its database is away: the
report is retried with backoff (0.1 s doubling to 3 s) for ``ATTEMPTS`` tries and for as long as
the step's lease may still hold (``patience``: its length, since nothing renewed it meanwhile),
then given up (the lease expires and the step is redelivered). A report that outlived its lease
is refused by the server and dropped, so waiting the whole lease costs nothing but the wait.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import grpc

from .._histogram import Histogram, Series
from .._rpc import wiggle_pb2 as pb
from .transport import AWAY, DEFAULT_TIMEOUT, Transport

__all__ = ["Reporter", "AdvanceUnsupported"]

log = logging.getLogger("wiggle.worker")

R = TypeVar("R")
Q = TypeVar("Q")


class AdvanceUnsupported(Exception):
    """The server answered AdvanceRun with UNIMPLEMENTED: it predates local execution."""


class Reporter:
    """Reports over a Transport with the retry-or-drop policy of the module docstring."""

    ATTEMPTS = 8

    def __init__(self, transport: Transport, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.transport = transport
        self.timeout = timeout
        self._latency: Histogram | None = None
        self._series: dict[str, Series] = {}  # RPC -> its series of ``latency``

    @property
    def latency(self) -> Histogram | None:
        """Seconds per report, by RPC (the worker's /metrics); None: not observed."""
        return self._latency

    @latency.setter
    def latency(self, histogram: Histogram | None) -> None:
        self._latency = histogram
        self._series = {}

    # Each call returns the coroutine of ``_send`` itself (one coroutine per report, not two).

    def complete(
        self, request: pb.CompleteTaskRequest, patience: float = 0.0
    ) -> Coroutine[Any, Any, pb.ReportResult | None]:
        """CompleteTask; None if refused or given up. ``patience``: seconds the step's lease may
        still hold, to keep retrying an absent server for (the module docstring)."""
        return self._send("CompleteTask", self.transport.complete, request, patience)

    def fail(
        self, request: pb.FailTaskRequest, patience: float = 0.0
    ) -> Coroutine[Any, Any, pb.ReportResult | None]:
        """FailTask; None if refused or given up (``patience`` as for ``complete``)."""
        return self._send("FailTask", self.transport.fail, request, patience)

    def advance(
        self, request: pb.AdvanceRunRequest, patience: float = 0.0
    ) -> Coroutine[Any, Any, pb.AdvanceRunResult | None]:
        """AdvanceRun; None if refused or given up; AdvanceUnsupported from a server without it
        (``patience`` as for ``complete``)."""
        return self._send("AdvanceRun", self.transport.advance, request, patience)

    async def _send(
        self, name: str, send: Callable[[Q, float], Awaitable[R]], request: Q, patience: float
    ) -> R | None:
        delay = 0.1
        tries = 0
        away = 0.0  # when the first try failed for the server's absence (read only then)
        while True:
            tries += 1
            started = time.perf_counter()
            try:
                result = await send(request, self.timeout)
                if self._latency is not None:
                    series = self._series.get(name)
                    if series is None:
                        series = self._series[name] = self._latency.labels((name,))
                    series.observe(time.perf_counter() - started)
                return result
            except grpc.RpcError as exc:
                code = exc.code()
                if code in AWAY:
                    away = away or time.monotonic()
                    if tries >= self.ATTEMPTS and time.monotonic() - away >= patience:
                        break
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 3.0)
                    continue
                if code == grpc.StatusCode.UNIMPLEMENTED and name == "AdvanceRun":
                    raise AdvanceUnsupported(exc.details()) from None
                # settled already (a resent report), or no longer this worker's: never retried
                # (docs/semantics.md#fencing)
                log.info("%s refused, dropped: %s", name, exc.details())
                return None
        log.warning(
            "%s gave up after %d tries in %.1f s; the lease will expire and the step will be redelivered",
            name,
            tries,
            time.monotonic() - away,
        )
        return None
