"""Wiggle for Python: a durable workflow engine with worker-side local execution modes.

The public names load on first use (PEP 562), so ``import wiggle.client`` brings in the client
and the workflow DSL but neither the engine, the stores nor the worker (tests/test_exports.py
checks ``sys.modules``); ``from wiggle import Worker`` works as always.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._model import ExecutionMode, Handback, Limit, NodeKind, RateLimit, RetryPolicy, WorkflowDefinition
    from .client import (
        AsyncClient,
        Client,
        Credentials,
        HistoryEntry,
        InstanceInfo,
        InstanceStatus,
        ScheduleInfo,
        TokenInfo,
        TokenStatus,
        WorkflowInfo,
    )
    from .errors import (
        FailedPrecondition,
        InvalidArgument,
        NotFound,
        PermanentError,
        RetryableError,
        Unavailable,
        WiggleError,
        WorkflowFailed,
    )
    from .worker import Step, Worker, WorkerOptions
    from .workflow import Blueprint, Branch, Workflow


# Where each public name lives; loaded by __getattr__ on first use and then cached here.
_WHERE: dict[str, str] = {
    "AsyncClient": ".client",
    "Blueprint": ".workflow",
    "Branch": ".workflow",
    "Client": ".client",
    "Credentials": ".client",
    "ExecutionMode": "._model",
    "FailedPrecondition": ".errors",
    "Handback": "._model",
    "HistoryEntry": ".client",
    "InstanceInfo": ".client",
    "InstanceStatus": ".client",
    "InvalidArgument": ".errors",
    "Limit": "._model",
    "RateLimit": "._model",
    "NodeKind": "._model",
    "NotFound": ".errors",
    "PermanentError": ".errors",
    "RetryPolicy": "._model",
    "RetryableError": ".errors",
    "ScheduleInfo": ".client",
    "Step": ".worker",
    "TokenInfo": ".client",
    "TokenStatus": ".client",
    "Unavailable": ".errors",
    "WiggleError": ".errors",
    "Worker": ".worker",
    "WorkerOptions": ".worker",
    "Workflow": ".workflow",
    "WorkflowDefinition": "._model",
    "WorkflowFailed": ".errors",
    "WorkflowInfo": ".client",
}


__all__ = [
    "__version__",
    "AsyncClient",
    "Blueprint",
    "Branch",
    "Client",
    "Credentials",
    "ExecutionMode",
    "FailedPrecondition",
    "Handback",
    "HistoryEntry",
    "InstanceInfo",
    "InstanceStatus",
    "InvalidArgument",
    "Limit",
    "RateLimit",
    "NodeKind",
    "NotFound",
    "PermanentError",
    "RetryPolicy",
    "RetryableError",
    "ScheduleInfo",
    "Step",
    "TokenInfo",
    "TokenStatus",
    "Unavailable",
    "WiggleError",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowFailed",
    "WorkflowInfo",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'wiggle' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
