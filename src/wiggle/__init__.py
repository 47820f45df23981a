"""Wiggle for Python: a durable workflow engine with worker-side local execution modes."""

from ._model import ExecutionMode, Handback, NodeKind, RetryPolicy, WorkflowDefinition
from ._version import __version__
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
    "NodeKind",
    "NotFound",
    "PermanentError",
    "RetryableError",
    "RetryPolicy",
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
