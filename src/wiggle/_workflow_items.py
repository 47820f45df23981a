"""The item tree a workflow is built into: one plain object per DSL call, compiled later.

``wiggle.workflow``'s builders append these to a branch; ``wiggle._workflow_compile`` turns the
tree into definition nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ._model import Limit, RateLimit, RetryPolicy, seconds_to_millis
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .workflow import Branch

__all__ = [
    "Item",
    "StepItem",
    "GateItem",
    "ChooseItem",
    "LoopItem",
    "SleepItem",
    "ForkItem",
    "UserTaskItem",
    "SignalItem",
    "ForEachItem",
    "SubWorkflowItem",
    "EndItem",
    "duration_millis",
]


class Item:
    pass


class StepLimits:
    """A worker step's time limits in milliseconds (0: none): start to close, heartbeat silence,
    schedule to start (docs/semantics.md#step-time-limits)."""

    __slots__ = ("timeout", "heartbeat", "schedule_to_start")

    def __init__(self, timeout: int = 0, heartbeat: int = 0, schedule_to_start: int = 0) -> None:
        self.timeout, self.heartbeat, self.schedule_to_start = timeout, heartbeat, schedule_to_start


NO_LIMITS = StepLimits()


class StepItem(Item):
    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        queue: str | None,
        retry: RetryPolicy | None,
        limits: StepLimits = NO_LIMITS,
        concurrency: Limit | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.fn, self.name, self.queue, self.retry, self.limits = fn, name, queue, retry, limits
        self.concurrency = concurrency  # docs/flow-control.md#concurrency-limits
        self.rate_limit = rate_limit  # docs/flow-control.md#per-key-rate-limits
        self.checkpoint = False


class GateItem(StepItem):
    pass


class ChooseItem(Item):
    def __init__(self, step: StepItem, if_true: Branch[Any], if_false: Branch[Any]) -> None:
        self.step, self.if_true, self.if_false = step, if_true, if_false


class LoopItem(Item):
    def __init__(self, step: StepItem, body: Branch[Any]) -> None:
        self.step, self.body = step, body


class SleepItem(Item):
    def __init__(self, name: str, millis: int) -> None:
        self.name, self.millis = name, millis


class ForkItem(Item):
    def __init__(self, name: str, branches: list[Branch[Any]]) -> None:
        self.name, self.branches = name, branches
        self.join_name = ""
        self.combine: Callable[..., Any] | None = None
        self.combine_queue: str | None = None


class UserTaskItem(Item):
    def __init__(self, name: str, timeout_millis: int, on_timeout: Branch[Any] | None) -> None:
        self.name, self.timeout_millis, self.on_timeout = name, timeout_millis, on_timeout


class SignalItem(Item):
    def __init__(
        self, name: str, signal: str, timeout_millis: int, on_timeout: Branch[Any] | None, key: str | None
    ) -> None:
        self.name, self.signal, self.timeout_millis = name, signal, timeout_millis
        self.on_timeout, self.key = on_timeout, key


class ForEachItem(Item):
    def __init__(
        self, name: str, join_name: str, items_key: str, body: Branch[Any], keys: dict[str, Any]
    ) -> None:
        self.name, self.join_name, self.items_key, self.body, self.keys = (
            name,
            join_name,
            items_key,
            body,
            keys,
        )


class SubWorkflowItem(Item):
    def __init__(self, name: str, spec: dict[str, Any], on_error: Branch[Any] | None) -> None:
        self.name, self.spec, self.on_error = name, spec, on_error


class EndItem(Item):
    def __init__(self, node_id: str, reason: str | None, success: bool) -> None:
        self.node_id, self.reason, self.success = node_id, reason, success


def optional_millis(value: timedelta | float | None, what: str) -> int:
    """``duration_millis`` of a time limit, 0 for None; a limit must be positive."""
    if value is None:
        return 0
    millis = duration_millis(value, what)
    if millis <= 0:
        raise InvalidArgument(f"{what} must be positive (leave it out for no limit), got {value!r}")
    return millis


def duration_millis(value: timedelta | float | int, what: str) -> int:
    """Milliseconds of a timedelta or a number of seconds, within MAX_DURATION_MILLIS (10 years)."""
    if isinstance(value, timedelta):
        return seconds_to_millis(value.total_seconds(), what)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a timedelta or seconds, got {type(value).__name__}")
    return seconds_to_millis(value, what)
