"""Testing workflows: an environment on a virtual clock, helpers, and an embedded server.

``WorkflowEnvironment`` (async) and ``SyncWorkflowEnvironment`` (sync, with ``.aio``) run a
server, in-process workers and a client on a ``VirtualClock`` that jumps over idle time
(docs/testing.md; docs/semantics.md#time-in-tests). ``mock_step`` replaces one step's
function; ``path_of`` reads the path an instance took. The pytest plugin (wiggle.pytest_plugin)
offers them as fixtures. ``EmbeddedServer`` is a plain server on the wall clock:

```python
async with EmbeddedServer() as server:
    async with server.worker([blueprint]) as worker:
        info = await server.client.start(blueprint, {"n": 1})
        done = await server.client.result(info.instance_id)
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ._clock import VirtualClock
from ._server.app import WiggleServer
from ._server.config import ServerConfig
from ._testing.environment import WorkflowEnvironment
from ._testing.helpers import mock_step, path_of
from ._testing.sync import AsyncView, SyncWorkflowEnvironment
from .client import AsyncClient
from .worker import Worker, WorkerOptions
from .workflow import Blueprint

__all__ = [
    "AsyncView",
    "EmbeddedServer",
    "SyncWorkflowEnvironment",
    "VirtualClock",
    "WorkflowEnvironment",
    "mock_step",
    "path_of",
]


class EmbeddedServer:
    """A real gRPC server on a free loopback port, in this process, with an AsyncClient."""

    def __init__(self, config: ServerConfig | None = None, **settings: Any) -> None:
        base = config or ServerConfig(port=0)
        if settings:
            base = msgspec.structs.replace(base, **settings)
        if base.port != 0 and config is None:
            base = msgspec.structs.replace(base, port=0)
        self.server = WiggleServer(base)
        self._client: AsyncClient | None = None

    @property
    def target(self) -> str:
        """host:port of the running server."""
        return self.server.target

    @property
    def client(self) -> AsyncClient:
        """An AsyncClient connected to this server."""
        if self._client is None:
            self._client = AsyncClient(self.target)
        return self._client

    def worker(self, blueprints: Iterable[Blueprint[Any]], options: WorkerOptions | None = None) -> Worker:
        """A Worker for this server (use ``async with``)."""
        return Worker(self.target, blueprints, options)

    async def start(self) -> EmbeddedServer:
        """Start serving."""
        await self.server.start()
        return self

    async def stop(self) -> None:
        """Stop the server and close the client."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        await self.server.stop(grace=1.0)

    async def __aenter__(self) -> EmbeddedServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
