"""A TCP proxy in front of PostgreSQL that a test can cut: its connections dropped, new ones
refused, as a network partition between one server and its database would."""

from __future__ import annotations

import asyncio
import contextlib


class DatabaseProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target`` on the running event loop (use it as
    ``async with``); ``down()`` cuts it, ``up()`` lets connections through again."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._open = True

    async def __aenter__(self) -> DatabaseProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.down()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def down(self) -> None:
        self._open = False
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def up(self) -> None:
        self._open = True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self._open:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.discard(writer)
        self._writers.discard(up_writer)
