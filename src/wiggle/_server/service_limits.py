"""The bounds the service enforces on requests, and the small checks its handlers share."""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from .._engine.engine import EngineConfig
from .._limits import MAX_POLL_QUEUES
from .._model import NAME_PATTERN, validate_name
from ..errors import InvalidArgument
from .instances import MAX_WAIT_SECONDS

__all__ = [
    "ServiceLimits",
    "optional_name",
    "wait_seconds",
    "poll_queues",
    "name_ok",
    "check_task_id",
    "check_session",
]

#: The pattern's match alone accepts exactly the names ``validate_name`` accepts (a string of at
#: most 200 allowed characters cannot be empty or padded), so ``validate_name`` only runs to word
#: the error of a bad one (every request names its step; a poll its worker and queues).
name_ok = NAME_PATTERN.fullmatch

#: A task id as the server hands it out: ``<token id>@<claim>`` (wiggle/_engine/state.py task_id_of).
_TASK_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:\-/]{0,180}@[0-9]{1,18}")


def check_task_id(task_id: str) -> None:
    """A report's ``task_id`` must be one an activation carried: it names the claim it reports on
    (docs/semantics.md#fencing). A bare token id is refused: it would fence nothing."""
    if _TASK_ID.fullmatch(task_id) is not None:
        return
    validate_name(task_id, "task_id")
    raise InvalidArgument(
        f"task_id {task_id!r} names no claim; report with the task_id the activation carried "
        "(<token id>@<claim>)"
    )


def chain_queues(queues: Iterable[str]) -> frozenset[str]:
    """Check a report's ``next_queues`` (a CompleteTask or a final AdvanceRun asking for its
    instance's next step): valid queue names; the queues as a set (empty: nothing asked).
    InvalidArgument otherwise."""
    names = frozenset(queues)
    _check_queue_count(len(names), "next_queues")
    for q in names:
        if name_ok(q) is None:
            validate_name(q, "next_queues")
    return names


def _check_queue_count(count: int, what: str) -> None:
    """InvalidArgument if a request lists more than MAX_POLL_QUEUES queues (wiggle/_limits.py)."""
    if count > MAX_POLL_QUEUES:
        raise InvalidArgument(
            f"{what} names {count} queues; the limit is {MAX_POLL_QUEUES} (run more workers, "
            "each serving a share of the queues)"
        )


class ServiceLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds the service enforces on requests."""

    max_wait_seconds: float = MAX_WAIT_SECONDS  # PollTasks and GetInstance waits
    max_tasks_per_poll: int = 256
    default_page_size: int = 50
    max_page_size: int = 1000
    max_payload_bytes: int = 1 << 20  # JSON fields and definitions (EngineConfig.max_payload_bytes)
    max_start_batch: int = 10_000  # contexts in one StartInstances call (clients send chunks)

    @classmethod
    def from_config(cls, config: EngineConfig) -> ServiceLimits:
        """The limits for an engine configuration (its payload limit)."""
        return cls(max_payload_bytes=config.max_payload_bytes)


def optional_name(value: str, what: str) -> None:
    """Check ``value`` as a name unless it is empty (an optional request field)."""
    if value:
        validate_name(value, what)


def wait_seconds(millis: int, limits: ServiceLimits) -> float:
    """A request's ``wait_millis`` in seconds, within [0, ``limits.max_wait_seconds``]."""
    return min(max(millis, 0) / 1000, limits.max_wait_seconds)


def poll_queues(
    worker_id: str, queues: Iterable[str], max_tasks: int, field: str, limits: ServiceLimits
) -> list[str]:
    """Check a poll (both services): the worker id, at least one valid queue, ``max_tasks`` (the
    request's ``field``) within the limit; the queues as a list. InvalidArgument otherwise."""
    if name_ok(worker_id) is None:
        validate_name(worker_id, "worker_id")
    names = list(queues)
    if not names:
        raise InvalidArgument("PollTasks names no queues; list the queues this worker serves")
    _check_queue_count(len(names), "PollTasks")
    for q in names:
        if name_ok(q) is None:
            validate_name(q, "queue")
    limit = limits.max_tasks_per_poll
    if not 1 <= max_tasks <= limit:
        raise InvalidArgument(f"{field} must be between 1 and {limit}, got {max_tasks}")
    return names


#: The longest ``PollTasksRequest.worker_session`` (a worker sends 16 hex digits).
MAX_SESSION_LENGTH = 64


def check_session(session: str) -> str:
    """A poll's ``worker_session`` (empty: none): InvalidArgument if it is too long."""
    if len(session) > MAX_SESSION_LENGTH:
        raise InvalidArgument(
            f"PollTasks worker_session is {len(session)} characters long; the limit is "
            f"{MAX_SESSION_LENGTH} (a stamp new with each worker process, such as 16 hex digits)"
        )
    return session
