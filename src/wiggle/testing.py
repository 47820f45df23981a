"""Helpers for testing workflows: an embedded server (in-memory unless configured) and workers.

::

    async with EmbeddedServer() as server:
        async with server.worker([blueprint]) as worker:
            info = await server.client.start(blueprint, {"n": 1})
            done = await server.client.result(info.instance_id)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from ._server.app import WiggleServer
from ._server.config import ServerConfig
from .client import AsyncClient
from .worker import Worker, WorkerOptions
from .workflow import Blueprint

__all__ = ["EmbeddedServer"]


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
