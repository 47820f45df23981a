"""Wiggle for Python: a durable workflow engine.

A workflow is a graph of plain Python functions (steps that chain, branch, loop, sleep, fork and
rejoin, wait for a person or a signal, and retry). A server keeps every instance's state durable;
workers run the steps; a client registers workflows and starts, reads, signals and cancels their
instances::

    from wiggle import Client, Workflow

    def price(order: dict) -> dict:
        return {**order, "total": order["quantity"] * 1250}

    orders = Workflow.define("orders").step(price).build()   # a Blueprint

    with Client("127.0.0.1:7233") as client:                 # a `wiggle server` there
        client.register(orders)
        started = client.start(orders, {"quantity": 3})
        print(client.result(started).context)                # once a worker serves "orders"

The main names:

- ``Workflow`` builds a workflow (``Workflow.define(name, ContextType)``, then ``.step(...)``,
  ``.choose(...)``, ``.sleep(...)``...); ``.build()`` makes its ``Blueprint``. ``RetryPolicy``,
  ``Limit``, ``RateLimit`` and ``ExecutionMode`` configure it.
- ``Client`` (blocking) and ``AsyncClient`` (asyncio) talk to a server; they return
  ``InstanceInfo``, ``HistoryEntry``, ``WorkflowInfo``, ``ScheduleInfo``, ``SignalResult`` and
  ``QueueInfo``.
- ``Worker`` runs the steps of blueprints (``WorkerOptions``); ``Step.current()`` tells a handler
  which step it runs.
- Errors are ``WiggleError`` subclasses (``InvalidArgument``, ``NotFound``, ``WorkflowFailed``...);
  a handler raises ``PermanentError`` to fail without retrying.
- ``wiggle.testing`` runs workflows in tests, on a clock that skips idle time.

The documentation (getting started, the workflow DSL, the API reference, operations) is in
docs/ of the source repository, from docs/index.md (``mkdocs serve`` shows it as a site).
"""

# The public names load on first use (PEP 562: ``__getattr__`` below), so ``import wiggle.client``
# brings in the client and the workflow DSL but neither the engine, the stores nor the worker
# (tests/test_exports.py checks ``sys.modules``); ``from wiggle import Worker`` works as always.
# Each name is listed twice, for type checkers (TYPE_CHECKING) and for the loader (_WHERE), and
# tests/test_exports.py holds the two lists to each other and to ``__all__``.

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
        PassedOver,
        PendingSignalInfo,
        QueueInfo,
        QueueWorker,
        ScheduleInfo,
        SignalResult,
        TokenInfo,
        TokenStatus,
        WorkflowInfo,
    )
    from .errors import (
        AlreadyFinished,
        ClientClosed,
        ErrorCode,
        FailedPrecondition,
        InvalidArgument,
        NotFound,
        PermanentError,
        PermissionDenied,
        ResourceExhausted,
        RetryableError,
        Unauthenticated,
        Unavailable,
        WiggleError,
        WorkflowFailed,
        WrongEventLoop,
    )
    from .worker import Step, Worker, WorkerOptions
    from .workflow import Blueprint, Branch, Workflow


# Where each public name lives; loaded by __getattr__ on first use and then cached here.
_WHERE: dict[str, str] = {
    "AlreadyFinished": ".errors",
    "AsyncClient": ".client",
    "Blueprint": ".workflow",
    "Branch": ".workflow",
    "Client": ".client",
    "ClientClosed": ".errors",
    "Credentials": ".client",
    "ErrorCode": ".errors",
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
    "PendingSignalInfo": ".client",
    "PermanentError": ".errors",
    "PermissionDenied": ".errors",
    "QueueInfo": ".client",
    "QueueWorker": ".client",
    "PassedOver": ".client",
    "ResourceExhausted": ".errors",
    "RetryPolicy": "._model",
    "RetryableError": ".errors",
    "ScheduleInfo": ".client",
    "SignalResult": ".client",
    "Step": ".worker",
    "TokenInfo": ".client",
    "TokenStatus": ".client",
    "Unauthenticated": ".errors",
    "Unavailable": ".errors",
    "WiggleError": ".errors",
    "Worker": ".worker",
    "WorkerOptions": ".worker",
    "Workflow": ".workflow",
    "WorkflowDefinition": "._model",
    "WorkflowFailed": ".errors",
    "WorkflowInfo": ".client",
    "WrongEventLoop": ".errors",
}


__all__ = [
    "__version__",
    "AlreadyFinished",
    "AsyncClient",
    "Blueprint",
    "Branch",
    "Client",
    "ClientClosed",
    "Credentials",
    "ErrorCode",
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
    "PendingSignalInfo",
    "PermanentError",
    "PermissionDenied",
    "PassedOver",
    "QueueInfo",
    "QueueWorker",
    "ResourceExhausted",
    "RetryPolicy",
    "RetryableError",
    "ScheduleInfo",
    "SignalResult",
    "Step",
    "TokenInfo",
    "TokenStatus",
    "Unauthenticated",
    "Unavailable",
    "WiggleError",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowFailed",
    "WorkflowInfo",
    "WrongEventLoop",
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
