"""WorkerOptions: how a worker runs, and the one place its values are checked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from .._client.targets import check_balance
from .._env import setting_int
from .._loop import EVENT_LOOPS
from .._model import validate_name
from ..errors import InvalidArgument

__all__ = ["WorkerOptions", "Bound", "BOUNDS", "SYNC_HANDLER_MODES", "TRANSPORTS", "check_options"]

#: WorkerOptions.sync_handlers values (see the class docstring).
SYNC_HANDLER_MODES = ("auto", "thread", "inline")
#: WorkerOptions.transport values.
TRANSPORTS = ("stream", "unary")


def _default_batch_size() -> int:
    return setting_int("WIGGLE_LOCAL_BATCH_SIZE")


def _default_flush_interval() -> float:
    return setting_int("WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS") / 1000


class WorkerOptions(msgspec.Struct, kw_only=True):
    """How a worker runs: ``Worker(target, blueprints, WorkerOptions(concurrency=32))``.

    ``wiggle worker`` takes every field as an option (``--poll-wait-seconds``) and a variable
    (``WIGGLE_WORKER_POLL_WAIT_SECONDS``); the configuration reference lists them all
    (docs/configuration.md, made from the attributes below by scripts/gen_settings_table.py).

    Attributes:
        concurrency: Steps (or local runs) in flight at once. Allowed: 1 to 256 (a poll asks
            for 256 steps at most).
        queues: The queues served (never empty); default: every queue of the blueprints.
        worker_id: This worker's name in leases and histories; default: the host name, the process id and a random suffix.
            Allowed: 1 to 200 of `A-Za-z0-9_.:-/@`, not starting with one of `.:-/@` (the server's rule for names).
            `wiggle worker --processes N`: process i is this id + `-i` (`orders-0`, `orders-1`, ...;
            without an id each process makes its own).
        poll_wait_seconds: How long one long poll waits for work before asking again. Allowed:
            0.1 to 60 (a server answers a poll within 60 s).
        heartbeat_seconds: Heartbeat period of a running step or local run (0: a third of the
            server's lease). Allowed: 0, or 0.05 to 3600.
        local_batch_size: LOCAL_ASYNC flushes after this many buffered steps (default
            `WIGGLE_LOCAL_BATCH_SIZE`, else 64). Allowed: 1 to 10000.
        flush_interval: LOCAL_ASYNC also flushes when this many seconds passed since the last
            flush (default `WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS` / 1000, else 0: only by size,
            checkpoint and handback). Allowed: 0 to 3600.
        lease_margin: A local run hands back when less than this share of its lease is left.
            Allowed: 0 to 1, 1 excluded.
        use_local_modes: False: ignore the execution mode and report every step with
            `CompleteTask` (SERVER style).
        chain_steps: A slot that reports a SERVER-mode step with `CompleteTask` asks for its
            instance's next step in the same call, and takes it from the answer (leased in the
            report's own commit), up to this many steps in a row before it asks the queue again
            with a poll, where priorities rank the waiting steps (0: never; every step is polled
            for). Allowed: 0 to 100000.
        chain_seconds: Nor does a slot ask once this many seconds have passed since it took
            the chain's first step from a poll: a chain of slow steps goes back to the queue
            after about this long (plus the step then running), not only after `chain_steps`
            steps (0: no time bound). Allowed: 0 to 3600.
        transport: `"stream"` multiplexes every call over one `WorkerSession` stream (the fast
            path); `"unary"` makes one RPC per call.
        balance: With several servers given, `"round_robin"` sends each call and each new
            stream to the next of them, so a stream answered UNAVAILABLE (its server stopping, or
            cut from its database) moves on; `"pick_first"` stays with the first that answers
            while it is up, the order a preference (docs/failover.md#a-server-without-its-database).
            Ignored when the worker is given a client (the client's own `balance` holds).
        register: Register the blueprints when the worker starts (a worker identity without
            the admin role skips it).
        drain_seconds: On SIGTERM or SIGINT (`Worker.run()`, `wiggle worker`) or `close()`, how
            long running steps get to finish; local runs hand back at their next step boundary.
            A step still running then is cut and handed back (with the steps its local run
            finished): it runs again elsewhere at once, no attempt spent. Give the process
            manager's stop timeout more than this plus 5 s (the hand-backs). Allowed: 0 to 86400.
        connect_seconds: A worker that starts before its server (no server answers: UNAVAILABLE)
            asks again every second for this long, then fails with Unavailable (0: it fails
            after its first try). Only at start: a server that goes away later is polled
            for until it is back. Allowed: 0 to 604800 (a week).
        threads: Threads of the pool for sync handlers (0: as many as `concurrency`). Allowed:
            0 to 4096.
        sync_handlers: Where plain (non-async) handlers run. `"thread"`: always in the thread
            pool, so a slow or blocking handler never delays the event loop. `"inline"`: always
            on the event loop (only for handlers known to be quick). `"auto"`: in the pool until
            the handler finished quicker than `inline_threshold_ms` eight times in a row, then
            inline (saving the thread hop, about a third of a worker's CPU on trivial steps);
            the first inline run slower than ten times the threshold sends it back to the pool
            for good. While an inline run holds the loop over a second, a thread of the worker
            heartbeats its steps, so none loses its lease (the others still wait for the loop).
        inline_threshold_ms: What counts as quick for `sync_handlers="auto"`. Allowed: 0 to
            1000.
        metrics_port: The worker's HTTP port: `/healthz` (its event loop turns), `/readyz` (it
            serves, its server answering) and Prometheus `/metrics` (with the metrics extra)
            (0: the `WIGGLE_WORKER_METRICS_PORT` variable, unset: off). `wiggle worker
            --processes N`: process i on this port + i. Allowed: 0 to 65535.
        metrics_host: The address the HTTP port binds (`""`: the `WIGGLE_WORKER_METRICS_HOST`
            variable, unset: `"0.0.0.0"`, every IPv4 address, as a Kubernetes `httpGet` probe or
            a Prometheus in another container needs); `"127.0.0.1"` keeps it to the worker's own
            host or container (compose's health check runs there); `"::"` every IPv6 address.
        event_loop: The event loop `Worker.run()` (so `wiggle worker`) runs on: `"auto"`,
            uvloop where it is installed (`pip install 'wiggle-workflows[uvloop]'`), else
            asyncio's; `"asyncio"`; `"uvloop"` (refused when it is not installed). A worker
            awaited with `run_async()` runs on its caller's loop.
    """

    concurrency: int = 16
    queues: Sequence[str] | None = None
    worker_id: str = ""
    poll_wait_seconds: float = 10.0
    heartbeat_seconds: float = 0.0  # 0: a third of the server's lease
    local_batch_size: int = msgspec.field(default_factory=_default_batch_size)
    flush_interval: float = msgspec.field(default_factory=_default_flush_interval)
    lease_margin: float = 0.25  # hand back when less than this share of the lease is left
    use_local_modes: bool = True
    chain_steps: int = 16  # steps a slot takes with its reports before it polls again; 0: never
    chain_seconds: float = 1.0  # ... nor once a chain has run this long; 0: no time bound
    transport: str = "stream"
    balance: str = "round_robin"  # "round_robin" | "pick_first" over several servers
    register: bool = True  # register the blueprints on start
    drain_seconds: float = 30.0  # how long running steps get to finish on a stop
    connect_seconds: float = 60.0  # how long a start waits for a server that is not there yet
    threads: int = 0  # thread pool for sync handlers; 0: concurrency
    sync_handlers: str = "auto"  # "auto" | "thread" | "inline" (see the class docstring)
    inline_threshold_ms: float = 0.5
    metrics_port: int = 0  # > 0: /healthz, /readyz, /metrics here (else WIGGLE_WORKER_METRICS_PORT)
    metrics_host: str = ""  # the address it binds ("": WIGGLE_WORKER_METRICS_HOST, else 0.0.0.0)
    event_loop: str = "auto"  # Worker.run()'s loop: "auto" (uvloop where installed) | "asyncio" | "uvloop"


class Bound(NamedTuple):
    """The values a numeric option accepts: ``low`` to ``high``, both included.

    ``zero`` says what 0 means when 0 is the low end and stands for a default or "off";
    ``least`` is then the smallest value other than 0 (a heartbeat round every microsecond would
    spin as a poll that never waits did). ``hint`` follows the value in a refusal (where else
    the value may have come from), ``why`` follows the range.
    """

    low: float
    high: float
    zero: str = ""
    least: float = 0.0
    hint: str = ""
    why: str = ""


#: The bounds of every numeric option but ``lease_margin`` (0 to 1, 1 excluded) and
#: ``metrics_port`` (a port), which check_options checks on their own. A value outside, NaN or
#: an infinity is refused by ``check_options``, so by ``Worker()`` and ``wiggle worker``.
BOUNDS: dict[str, Bound] = {
    # a poll asks for as many steps as the worker has free slots, and the server refuses a poll
    # for more than 256 (ServiceLimits.max_tasks_per_poll, wiggle/_server/service_limits.py):
    # a worker with more slots had every poll refused and never ran a step
    "concurrency": Bound(1, 256, why="a poll asks for 256 steps at most"),
    # 0 made every poll come back at once, empty: an idle worker asked ~420 times a second (20%
    # of a core); the server answers a poll within 60 s (MAX_WAIT_SECONDS,
    # wiggle/_server/delivery.py), so a longer wait is never waited
    "poll_wait_seconds": Bound(
        0.1,
        60,
        why="a poll that waits 0 comes back at once, and an idle worker asks again and again; "
        "a server holds a poll 60 s at most",
    ),
    # the heartbeat loop sleeps this long between rounds, idle or not (wiggle/_worker/heartbeats.py)
    "heartbeat_seconds": Bound(0, 3600, zero="0: a third of the lease", least=0.05),
    # an AdvanceRun batch holds 10,000 steps at most (MAX_BATCH_STEPS, wiggle/_fast/batch_py.py)
    "local_batch_size": Bound(
        1,
        10_000,
        hint="check WIGGLE_LOCAL_BATCH_SIZE if you did not pass it",
        why="an AdvanceRun batch holds 10000 steps at most",
    ),
    "flush_interval": Bound(
        0, 3600, zero="0: no timed flush", hint="check WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS if you did not pass it"
    ),
    "chain_steps": Bound(0, 100_000, zero="0: every step is polled for"),
    "chain_seconds": Bound(0, 3600, zero="0: no time bound"),
    "drain_seconds": Bound(0, 24 * 3600),
    "connect_seconds": Bound(0, 7 * 24 * 3600, zero="0: fail after the first try"),
    "threads": Bound(0, 4096, zero="0: as many as concurrency"),
    # a handler that takes a second is not quick: inline, it would hold the event loop that long
    "inline_threshold_ms": Bound(0, 1000),
}


def _number(value: float) -> str:
    """A bound or a value as a message shows it: 60 (not 60.0), 0.05, -1, nan."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def bound_text(bound: Bound) -> str:
    """What ``bound`` allows, as the messages and docs/configuration.md say it: ``0.1 to 60``,
    ``0, or 0.05 to 3600``."""
    if bound.least:
        return f"0, or {_number(bound.least)} to {_number(bound.high)}"
    return f"{_number(bound.low)} to {_number(bound.high)}"


def _check_bound(name: str, value: float, bound: Bound) -> None:
    """ValueError naming ``name``, its value and what it allows, if ``value`` is outside ``bound``."""
    inside = bound.low <= value <= bound.high  # False for NaN too
    if inside and not 0 < value < bound.least:
        return
    zero = f" ({bound.zero})" if bound.zero else ""
    if value < bound.low:  # "must be >= LOW" first: the shape a too-small option's refusal has had
        text = f"{name} must be >= {_number(bound.low)}{zero}, got {_number(value)}"
    elif inside:  # above 0, below the least
        text = f"{name} must be 0{zero} or at least {_number(bound.least)}, got {_number(value)}"
    elif value > bound.high:
        text = f"{name} must be <= {_number(bound.high)}, got {_number(value)}"
    else:
        text = f"{name} must be a number, got {_number(value)}"
    hint = f" ({bound.hint})" if bound.hint else ""
    why = f" ({bound.why})" if bound.why else ""
    raise ValueError(f"{text}{hint}; allowed: {bound_text(bound)}{why}")


#: Each option's declared type (``_check_type``), read once.
_FIELD_TYPES = {field.name: field.type for field in msgspec.structs.fields(WorkerOptions)}


def _check_type(name: str, value: object) -> None:
    """ValueError naming ``name`` unless ``value`` has the type its field declares: msgspec does
    not check a Struct's types when it is made, so ``concurrency="4"`` met ``<=`` with "'<=' not
    supported between instances of 'int' and 'str'", and ``concurrency=4.5`` was taken."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if _FIELD_TYPES[name] is int and not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")


def check_options(options: WorkerOptions) -> None:
    """Raise ValueError naming the first option that cannot work, its value and what it accepts."""
    for name, bound in BOUNDS.items():
        _check_type(name, getattr(options, name))
        _check_bound(name, getattr(options, name), bound)
    if options.worker_id:
        # the server checks the id in every poll (wiggle/_server/service_limits.py): a worker
        # with an id it refuses started, then logged "PollTasks refused" twice a second forever
        try:
            validate_name(options.worker_id, "worker_id")
        except InvalidArgument as exc:
            raise ValueError(f"{exc}: the server refuses such a worker id") from None
    if options.transport not in TRANSPORTS:
        raise ValueError(f"transport must be 'stream' or 'unary', got {options.transport!r}")
    check_balance(options.balance)
    if options.event_loop not in EVENT_LOOPS:
        raise ValueError(f"event_loop must be 'auto', 'asyncio' or 'uvloop', got {options.event_loop!r}")
    if options.sync_handlers not in SYNC_HANDLER_MODES:
        raise ValueError(f"sync_handlers must be 'auto', 'thread' or 'inline', got {options.sync_handlers!r}")
    if not 0 <= options.lease_margin < 1:  # False for NaN too
        raise ValueError(f"lease_margin must be in [0, 1), got {options.lease_margin}")
    if not 0 <= options.metrics_port <= 65535:
        raise ValueError(f"metrics_port must be between 0 (off) and 65535, got {options.metrics_port}")
    if isinstance(options.queues, str):
        # a lone string is a Sequence[str] too: "orders" would serve the queues o, r, d, e, s
        raise ValueError(f"queues must be a list of queue names, got the string {options.queues!r}")
    if options.queues is not None and not list(options.queues):
        # `wiggle worker --queues ""` (or ","): the command stopped on "the worker serves no
        # queues" with a traceback, from Worker() past its own checks
        raise ValueError(
            "queues names no queue, so the worker serves no queues: give queue names, or leave "
            "queues out to serve every queue of the blueprints"
        )
