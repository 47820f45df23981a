"""The bounds the service enforces on requests, and the small checks its handlers share."""

from __future__ import annotations

import msgspec

from .._engine.engine import EngineConfig
from .._model import validate_name
from .instances import MAX_WAIT_SECONDS

__all__ = ["ServiceLimits", "optional_name", "wait_seconds"]


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
