"""Clients of the control plane: ``Client`` (blocking) and ``AsyncClient`` (asyncio).

Both register workflows, start instances, read them, wait for them, list, cancel, complete
user tasks, send signals and retry failed instances. Errors arrive as ``wiggle.errors`` exceptions carrying the server's message.

``AsyncClient`` is written once (wiggle/_client/aio.py); ``Client`` is generated from it
(wiggle/_client/sync.py, by scripts/gen_sync_client.py).
"""

from __future__ import annotations

from ._client.aio import AsyncClient
from ._client.core import DEFAULT_TARGET
from ._client.sync import Client
from ._client.types import (
    HistoryEntry,
    InstanceInfo,
    PassedOver,
    PendingSignalInfo,
    QueueInfo,
    QueueWorker,
    ScheduleInfo,
    SignalResult,
    TokenInfo,
    WorkflowInfo,
)
from ._security.credentials import Credentials
from ._status import InstanceStatus, TokenStatus

__all__ = [
    "Client",
    "AsyncClient",
    "InstanceInfo",
    "InstanceStatus",
    "TokenInfo",
    "TokenStatus",
    "HistoryEntry",
    "WorkflowInfo",
    "ScheduleInfo",
    "PendingSignalInfo",
    "SignalResult",
    "QueueInfo",
    "QueueWorker",
    "PassedOver",
    "DEFAULT_TARGET",
    "Credentials",
]
