"""A client's link to its server: the gRPC channel, the stub over it and the start stream, and
the rules of their lifetime. ``AsyncLink`` is an ``AsyncClient``'s (wiggle/_client/aio.py),
``Link`` a blocking ``Client``'s (scripts/gen_sync_client.py maps one name to the other).

- **One event loop.** grpc.aio binds a channel to the event loop it is made on; awaited on another
  loop, its calls hang or fail with asyncio's "attached to a different loop". An outside trial made
  an AsyncClient at a web app's import, before any loop ran: its first ``start`` inside
  ``asyncio.run`` never returned, and ``get`` failed so. ``AsyncLink`` makes the channel on the
  client's first call, inside the loop that runs it, and refuses any other loop with
  ``WrongEventLoop``, saying the rule: an AsyncClient serves the event loop it was first used on.
  ``Link`` makes its channel at once: any thread may share a blocking client.
- **Close.** After ``close()``, a call raises ``ClientClosed`` at once, and nothing is sent; a call
  that ``close()`` cut off in flight raises ``ClientClosed`` too, saying it may or may not have
  been applied. Before, gRPC's own words came through: a bare ``CancelledError`` in tasks nobody
  had cancelled, "Locally cancelled by application!", "Channel is closed.", "Cannot invoke RPC on
  closed channel!".
- **No answer.** A call that got no answer within its deadline (DEADLINE_EXCEEDED) raises
  ``Unavailable`` (``core.no_answer``), as for a server that is away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from .._rpc import wiggle_pb2_grpc as pb_grpc
from .._wire.status import error_from_rpc
from ..errors import ErrorCode, WrongEventLoop
from . import core
from .hosting import refuse_on_servers_loop
from .start_stream import AsyncStartStream, StartStream, cancelled_by_its_caller

__all__ = ["AsyncLink", "Link"]


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is a gRPC error with the status CANCELLED."""
    code = getattr(exc, "code", None)
    return isinstance(exc, grpc.RpcError) and callable(code) and code() == grpc.StatusCode.CANCELLED


def _error_of_rpc(exc: grpc.RpcError, timeout: float) -> Exception:
    error = error_from_rpc(exc)
    if error.code is ErrorCode.DEADLINE_EXCEEDED:
        return core.no_answer(timeout)
    return error


class AsyncLink:
    """An ``AsyncClient``'s channel, stub and start stream: made on its first call, on the event
    loop running it, and used on that loop only (the module docstring)."""

    def __init__(
        self, target: str, make: Callable[[], grpc.aio.Channel], channel: grpc.aio.Channel | None = None
    ) -> None:
        self.target = target
        self._make = make
        self._channel = channel  # one given to the client is used as it is (the caller made it)
        self._stub: Any = None
        self._stream: AsyncStartStream | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop served: the first call's
        self.closed = False

    def check(self) -> None:
        """Before each call: ClientClosed once closed; WrongEventLoop on any loop but the first
        call's (which makes the channel there)."""
        if self.closed:
            raise core.client_closed(cut=False)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise WrongEventLoop(
                f"AsyncClient({self.target!r}).channel or .stub was read outside a running event loop: "
                "its channel is made on its first use inside the event loop that runs its calls (read "
                "it from a coroutine; outside any event loop, use the blocking Client)"
            ) from None
        if self._loop is None:
            if self._channel is None:
                self._channel = self._make()
            self._stub = pb_grpc.WiggleControlPlaneStub(self._channel)
            self._stream = AsyncStartStream(self._stub)
            self._loop = loop
        elif loop is not self._loop:
            raise WrongEventLoop(self._elsewhere("its calls"))

    def _elsewhere(self, what: str) -> str:
        """Why this loop is the wrong one, and what to do."""
        assert self._loop is not None
        where = "which is closed now" if self._loop.is_closed() else "which is another one"
        return (
            f"AsyncClient({self.target!r}) serves the event loop of its first call, {where}; {what} cannot "
            "run on this loop (its gRPC channel works on its own loop only). Use one AsyncClient per event "
            "loop: make it where the loop runs (inside the coroutine asyncio.run runs, or an app's "
            "startup), or use the blocking Client, which any thread may share"
        )

    def stub(self) -> Any:
        """The stub of the channel (``check`` first)."""
        self.check()
        return self._stub

    def channel(self) -> grpc.aio.Channel:
        """The channel (``check`` first: it is made on the first call's loop)."""
        self.check()
        assert self._channel is not None
        return self._channel

    def stream(self) -> AsyncStartStream:
        """The start stream (``check`` first)."""
        self.check()
        assert self._stream is not None
        return self._stream

    def error_of(self, exc: BaseException, timeout: float) -> BaseException:
        """What a call that failed with ``exc`` raises: ClientClosed if ``close()`` cut it off (a
        CancelledError the task did not ask for) or it was made after; Unavailable if it got no
        answer within ``timeout`` seconds; the class of ``wiggle.errors`` of any other gRPC error;
        else ``exc`` itself (the task's own cancellation, above all)."""
        if self.closed:
            if isinstance(exc, asyncio.CancelledError) and not cancelled_by_its_caller():
                return core.client_closed(cut=True)
            if _cancelled(exc):
                return core.client_closed(cut=True)
            if isinstance(exc, grpc.aio.UsageError):  # "Channel is closed."
                return core.client_closed(cut=False)
        if isinstance(exc, grpc.RpcError):
            return _error_of_rpc(exc, timeout)
        return exc

    async def close(self) -> None:
        """End the stream and close the channel: the calls in flight are cut off (ClientClosed),
        later ones refused. A second close does nothing. On another loop while the client's own
        still runs (another thread's), WrongEventLoop: its channel closes on its own loop only."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        owner = self._loop
        if owner is not None and owner is not loop and not owner.is_closed():
            raise WrongEventLoop(self._elsewhere("close()"))
        self.closed = True
        if owner is not None and owner is not loop:
            # its loop is closed, and its calls with it. Cancelling its stream now would have gRPC
            # hand that to the closed loop (a logged "Event loop is closed" traceback): the channel
            # is left as the loop left it, to gRPC's own clean-up
            return
        if self._stream is not None:
            await self._stream.close()
        if self._channel is not None:
            await self._channel.close()


class Link:
    """A blocking ``Client``'s channel, stub and start stream, made at once (the module
    docstring). Each call of a client on the event loop of a server of this process is refused
    (wiggle/_client/hosting.py)."""

    def __init__(
        self, target: str, make: Callable[[], grpc.Channel], channel: grpc.Channel | None = None
    ) -> None:
        self.target = target
        self._channel = channel if channel is not None else make()
        self._stub: Any = pb_grpc.WiggleControlPlaneStub(self._channel)
        self._stream = StartStream(self._stub)
        self.closed = False

    def check(self) -> None:
        """Before each call: ClientClosed once closed; RuntimeError on the loop of its server."""
        if self.closed:
            raise core.client_closed(cut=False)
        refuse_on_servers_loop(self.target)

    def stub(self) -> Any:
        """The stub of the channel (``check`` first)."""
        self.check()
        return self._stub

    def channel(self) -> grpc.Channel:
        """The channel (ClientClosed once closed)."""
        if self.closed:
            raise core.client_closed(cut=False)
        return self._channel

    def stream(self) -> StartStream:
        """The start stream (``check`` first)."""
        self.check()
        return self._stream

    def error_of(self, exc: BaseException, timeout: float) -> BaseException:
        """As ``AsyncLink.error_of``: a call that ``close()`` cut off fails with CANCELLED ("Channel
        closed!", "Locally cancelled by application!"), one that met the closed channel with
        ValueError ("Cannot invoke RPC on closed channel!": closed by another thread meanwhile)."""
        if self.closed:
            if _cancelled(exc):
                return core.client_closed(cut=True)
            if type(exc) is ValueError:
                return core.client_closed(cut=False)
        if isinstance(exc, grpc.RpcError):
            return _error_of_rpc(exc, timeout)
        return exc

    def close(self) -> None:
        """End the stream and close the channel: the calls in flight are cut off (ClientClosed),
        later ones refused. A second close does nothing."""
        if self.closed:
            return
        self.closed = True
        self._stream.close()
        self._channel.close()
