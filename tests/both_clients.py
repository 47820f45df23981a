"""Either client behind one awaitable face, for tests that hold both to one behaviour:
``client = EitherClient(target, blocking)``, then ``await client.call("get", instance_id)`` runs
``Client.get`` in a thread or awaits ``AsyncClient.get``; ``await client.close()``."""

from __future__ import annotations

import asyncio
from typing import Any

from wiggle import AsyncClient, Client

__all__ = ["EitherClient"]


class EitherClient:
    def __init__(self, target: str, blocking: bool, **options: Any) -> None:
        self.blocking = blocking
        self.client: Any = Client(target, **options) if blocking else AsyncClient(target, **options)

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The client's method ``name`` with these arguments (the blocking one in a thread)."""
        method = getattr(self.client, name)
        if self.blocking:
            return await asyncio.to_thread(method, *args, **kwargs)
        return await method(*args, **kwargs)

    async def close(self) -> None:
        if self.blocking:
            await asyncio.to_thread(self.client.close)
        else:
            await self.client.close()
