"""What both clients share besides their requests (wiggle/_client/messages.py): the channel's
options, the wait slicing, the result check and the errors of a call that was cut off, got no
answer or never reached a server.

wiggle/_client/aio.py calls these; wiggle/_client/sync.py is generated from it, so each of them
and each reply conversion (wiggle/_wire/convert.py) exists once.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from .._rpc import wiggle_pb2 as pb
from .._security.credentials import Credentials
from .._status import InstanceStatus
from ..errors import ClientClosed, InvalidArgument, Unavailable, WorkflowFailed
from .tls_trouble import closed_unanswered, telling, tls_trouble
from .types import InstanceInfo

__all__ = [
    "seconds_of",
    "wait_seconds",
    "never_reached",
    "more_telling",
    "no_answer",
    "client_closed",
    "where_it_waits",
    "DEFAULT_TARGET",
    "CHANNEL_OPTIONS",
    "CALL_TIMEOUT",
    "MAX_WAIT_SLICE",
    "WaitClock",
    "check_result",
]

DEFAULT_TARGET = "127.0.0.1:7233"
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
    # A server that stops without closing its connections (SIGSTOP, a paused VM, a network that
    # drops everything) is found by an unanswered HTTP/2 ping: a ping goes out after 10 s without
    # a read, and without its answer 5 s later the connection is closed, so the calls on it fail
    # UNAVAILABLE and a channel given several servers moves to the next
    # (docs/failover.md#a-server-that-hangs-instead-of-dying). gRPC 1.85 times a ping out by
    # ping_timeout_ms (60 s by default), not keepalive_timeout_ms: both are set. Without
    # max_pings_without_data 0 a long wait would stop pinging after two. The server permits a
    # ping every 5 s (wiggle/_server/app.py); gRPC's core answers them, not the event loop, so
    # a busy server is not taken for a frozen one.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.ping_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    # A server that went away (a restart, a fail-over) is dialled again within 0.1 s doubling to
    # 1 s, not gRPC's default 1 s growing to 120 s: the calls of a worker or a client find it
    # soon after it is back (docs/operations.md#stopping-a-server).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]
CALL_TIMEOUT = 30.0  # seconds, for every call but the waits
FIRST_CONTACT = 3.0  # seconds a client that never reached its server asks again for (aio.py)
MAX_WAIT_SLICE = 30.0  # one GetInstance wait; the server caps it too (wiggle/_server/instances.py)


def seconds_of(value: object, what: str) -> float:
    """A client-side wait (``timeout``, ``patience``) in seconds, from a timedelta or a number;
    InvalidArgument naming ``what`` for anything else. As ``start_delay`` and the test kit's
    waits take either (wiggle/_testing/environment.py)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise InvalidArgument(f"{what} must be a timedelta (or seconds), got {value!r}")


def wait_seconds(value: object) -> float:
    """A wait's ``timeout`` (``wait``, ``result``) in seconds; InvalidArgument for a negative one
    (or NaN), which ``wait`` took for "no time at all" and answered with a snapshot, saying
    nothing (an outside trial: ``wait(timeout=-1)``)."""
    seconds = seconds_of(value, "timeout")
    if not seconds >= 0:
        raise InvalidArgument(
            f"timeout must be >= 0 seconds (0: the instance as it is now, without waiting), got {value!r}"
        )
    return seconds


class WaitClock:
    """Slices a client-side wait into server-side waits of at most MAX_WAIT_SLICE seconds.

    ``from_first_failure``: the time counts from the first ``again_in`` (the first time the
    server was found away), not from now. A client's ``patience`` is such a clock: a call whose
    first try got no answer within its 30 s deadline is still asked again for ``patience``
    seconds, where a clock started with the call would have been spent by then
    (docs/failover.md#what-a-client-does-while-the-server-is-away)."""

    def __init__(self, timeout: float, *, from_first_failure: bool = False) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.remaining = timeout
        self._delay = 0.1  # before asking again after an UNAVAILABLE (``again_in``)
        self._from_first_failure = from_first_failure

    def request(self, instance_id: str) -> tuple[pb.GetInstanceRequest, float]:
        """The next GetInstance wait and the call timeout that covers it."""
        self.remaining = self.deadline - time.monotonic()
        wait_ms = max(int(min(self.remaining, MAX_WAIT_SLICE) * 1000), 0)
        return pb.GetInstanceRequest(
            instance_id=instance_id, wait_millis=wait_ms
        ), wait_ms / 1000 + CALL_TIMEOUT

    def done(self, info: InstanceInfo) -> bool:
        """True once the instance finished or the time is up."""
        return info.finished or self.remaining <= 0

    def expired(self) -> bool:
        """True once the time is up."""
        return time.monotonic() >= self.deadline

    def again_in(self) -> float | None:
        """The server was away (UNAVAILABLE: stopping, restarting, unreachable): seconds to pause
        before asking again (0.1 doubling to 2), or None when the wait's time is up."""
        if self._from_first_failure:
            self._from_first_failure = False
            self.deadline = time.monotonic() + self.timeout
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        delay = min(self._delay, remaining)
        self._delay = min(self._delay * 2, 2.0)
        return delay


async def apause(seconds: float) -> None:
    """Sleep (the asyncio client's; the blocking client's is ``pause``: scripts/gen_sync_client.py)."""
    await asyncio.sleep(seconds)


def pause(seconds: float) -> None:
    """Sleep (the blocking client's)."""
    time.sleep(seconds)


def where_it_waits(info: InstanceInfo) -> str:
    """Where a running instance is, in words, for a wait that timed out: which steps wait on
    which queue for a worker, run on which worker, or wait for time, a signal, a person or a
    child ("" when the snapshot carries no tokens)."""
    if info.waiting_reason:
        return info.waiting_reason
    said: list[str] = []
    for token in info.tokens[:3]:
        status = str(token.status)
        if status == "READY":
            if token.last_error:  # a worker gave it back or it failed: that says more than a guess
                why = f"last error: {token.last_error}"
            else:
                why = f"is a worker serving queue {token.queue!r}?"
            said.append(
                f"step {token.node_id!r} is READY on queue {token.queue!r}, attempt {token.attempt} ({why})"
            )
        elif status == "RUNNING":
            holder = token.lease_owner or token.local_run_owner
            said.append(f"step {token.node_id!r} is RUNNING on worker {holder}, attempt {token.attempt}")
        elif status == "WAITING":
            said.append(f"{token.node_id!r} waits for its time (a sleep, or a retry's backoff)")
        elif status == "AWAITING":
            what = f"child {token.child_id}" if token.child_id else "a signal or a person"
            said.append(f"{token.node_id!r} waits for {what}")
    more = len(info.tokens) - len(said)
    return "; ".join(said) + (f"; and {more} more" if more > 0 and said else "")


def never_reached(exc: Unavailable, target: str, credentials: Credentials | None = None) -> Unavailable:
    """``exc`` of a client that has never reached its server, saying where it looked: a wrong
    target or a server not started is the likely cause, not a restart; or, when the details
    tell of a failed TLS handshake, or of a server that closed the connection unanswered (a TLS
    mismatch, a client certificate missing or refused, as ``credentials`` say), that it is one
    and what to check (tls_trouble.py)."""
    trouble = tls_trouble(str(exc))
    if not trouble and credentials is not None:
        trouble = closed_unanswered(str(exc), credentials.tls, bool(credentials.cert_file))
    if trouble:
        return Unavailable(f"{exc} ({trouble}; at {target})")
    return Unavailable(f"{exc} (is a `wiggle server` running at {target}? none has answered there yet)")


def more_telling(kept: Unavailable | None, exc: Unavailable) -> Unavailable:
    """Of a client's tries that never reached its server, the failure that tells most of why
    (tls_trouble.telling): a TLS failure on one of a name's addresses wins over a refused
    connection on another (``localhost``: ::1 refused, 127.0.0.1 a TLS server); of two alike, the later."""
    if kept is None or telling(str(exc)) >= telling(str(kept)):
        return exc
    return kept


def no_answer(timeout: float, what: str = "the call", safe: str = "") -> Unavailable:
    """Unavailable for a call that got no answer within its ``timeout`` (DEADLINE_EXCEEDED: a
    server or a network that is frozen, slow or away). It is the same situation as a server
    that answers UNAVAILABLE, and is handled so: a call safe to repeat is asked again while the
    client's patience lasts (aio.py ``_again_while_away``); one that is not fails at once, and may
    or may not have happened. Before, a lost answer was a bare WiggleError with the code
    DEADLINE_EXCEEDED, and a start with a request_id was not asked again (a network-fault trial).
    ``safe``: how a repeat is made safe, for the call at hand."""
    return Unavailable(
        f"{what} got no answer within {timeout:g} s (the server, or the network to it, is slow or away); "
        f"if it changes something, it may or may not have been applied{safe}"
    )


#: ClientClosed's two messages (wiggle/_client/link.py, wiggle/_client/start_stream.py)
_AFTER_CLOSE = "the client is closed (close() was called on it): this call was not sent (make a new client)"
_CUT = (
    "the call was cut off by close() of its client: it may or may not have been applied "
    "(a start with a request_id, or a signal with a signal_id, is safe to repeat on a new client; "
    "a get shows where an instance is)"
)


def client_closed(cut: bool) -> ClientClosed:
    """ClientClosed for a call that was not sent, being made after ``close()`` (or queued behind
    another start when it came), or, ``cut``, for one that ``close()`` cut off in flight (it may
    or may not have been applied)."""
    return ClientClosed(_CUT if cut else _AFTER_CLOSE)


def check_result(info: InstanceInfo, timeout: float) -> InstanceInfo:
    """``info`` if it COMPLETED; TimeoutError if still running, WorkflowFailed if FAILED or CANCELLED."""
    if not info.finished:
        where = where_it_waits(info)
        raise TimeoutError(
            f"instance {info.instance_id} is still {info.status} after {timeout} s"
            + (f": {where}" if where else "")
        )
    if info.status in (InstanceStatus.FAILED, InstanceStatus.CANCELLED):
        raise WorkflowFailed(f"instance {info.instance_id} {info.status}: {info.error or info.reason}")
    return info
