"""Revocation that takes effect: when an identity-file reload removes or changes an identity, the
calls it authenticated end and the steps its workers hold go back to the queue (docs/security.md).

- ``OpenCalls`` knows every authenticated gRPC call in progress (unary, WorkerSession streams,
  long polls), by identity name; ``CallTracker``, an interceptor placed after the
  ``AuthInterceptor`` (wiggle/_server/guard.py), enters and leaves them.
- ``Revoker`` is the identity table's ``on_reload`` callback (wiggle/_security/tokens.py): for
  each removed or changed identity it ends its calls with UNAUTHENTICATED ("credential
  revoked"), waits (up to ``grace`` seconds) for them to be over, then hands back every step
  leased under that identity: READY at once, the same attempt, a RELEASED history entry — the
  steps are not left to their lease expiry.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
from google.protobuf.message import Message

from .._engine.engine import LoadedDefinition
from .._engine.state import (
    Changes,
    HistoryEntry,
    HistoryOutcome,
    InstanceState,
    split_task_id,
    token_instance_id,
)
from .._limits import storable_text
from .._security.roles import owner_prefix
from .._security.tokens import Identity
from ..errors import WiggleError
from .guard import CALLER
from .instances import Instances

__all__ = ["OpenCall", "OpenCalls", "CallTracker", "Revoker", "OPEN_CALL", "REVOKED_MESSAGE"]

log = logging.getLogger("wiggle.server")

REVOKED_MESSAGE = (
    "the credential of {name!r} was revoked (its identity was removed or changed in the identity "
    "file); reconnect with a valid credential"
)
#: how many leases one revocation releases per store read (it reads again until none are left)
_LEASE_PAGE = 500
#: how long a revocation waits, at most, for a stream's reply to be sent before ending it
_SEND_WAITS, _SEND_WAIT_SECONDS = 100, 0.01


class OpenCall:
    """One authenticated call in progress: who made it, its context, the task serving it."""

    __slots__ = ("identity", "method", "context", "task", "owners", "done", "sending", "revoked")

    def __init__(self, identity: Identity, method: str, context: grpc.aio.ServicerContext) -> None:
        self.identity = identity
        self.method = method
        self.context = context
        self.task = asyncio.current_task()
        #: worker ids this call polled under (the WorkerSession adds them: wiggle/_server/session.py),
        #: for credentials whose leases carry no ``<name>/`` prefix (admin)
        self.owners: set[str] = set()
        self.done = asyncio.Event()
        #: a stream's reply is being sent by gRPC (the task is outside the handler)
        self.sending = False
        #: the UNAUTHENTICATED message once a revocation ended the call (Revoker._end)
        self.revoked: str | None = None


#: the call being served, for the WorkerSession to note its worker ids on
OPEN_CALL: contextvars.ContextVar[OpenCall | None] = contextvars.ContextVar("wiggle_open_call", default=None)


class OpenCalls:
    """The authenticated calls in progress, by identity name."""

    def __init__(self) -> None:
        self._by_name: dict[str, set[OpenCall]] = {}

    def __len__(self) -> int:
        return sum(len(calls) for calls in self._by_name.values())

    def enter(self, identity: Identity, method: str, context: grpc.aio.ServicerContext) -> OpenCall:
        """Note a call that starts being served now."""
        call = OpenCall(identity, method, context)
        self._by_name.setdefault(identity.name, set()).add(call)
        return call

    def leave(self, call: OpenCall) -> None:
        """Note that ``call`` is over."""
        calls = self._by_name.get(call.identity.name)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._by_name[call.identity.name]
        call.done.set()

    def of(self, names: Iterable[str]) -> list[OpenCall]:
        """The calls in progress of the identities called ``names``."""
        return [call for name in names for call in self._by_name.get(name, ())]


class CallTracker(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Enters every authenticated call in ``OpenCalls`` while it is served. Placed after the
    ``AuthInterceptor``, whose wrapper has set the caller (``CALLER``) when this one runs."""

    def __init__(self, calls: OpenCalls) -> None:
        self.calls = calls
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None:
            return handler
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = wrapped
        return wrapped

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        calls = self.calls

        def enter(context: grpc.aio.ServicerContext) -> OpenCall | None:
            identity = CALLER.get()
            if identity is None:  # a public method (health): nothing to revoke
                return None
            call = calls.enter(identity, method, context)
            OPEN_CALL.set(call)
            return call

        def leave(call: OpenCall | None) -> None:
            if call is not None:
                calls.leave(call)

        if handler.unary_unary is not None or handler.stream_unary is not None:
            inner = handler.unary_unary or handler.stream_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Message:
                call = enter(context)
                try:
                    return await inner(request, context)  # type: ignore[no-any-return]
                except asyncio.CancelledError:
                    await _answer_revoked(call, context)
                    raise
                finally:
                    leave(call)

            make = (
                grpc.unary_unary_rpc_method_handler
                if handler.unary_unary is not None
                else grpc.stream_unary_rpc_method_handler
            )
            return make(unary, handler.request_deserializer, handler.response_serializer)
        inner_stream = handler.stream_stream or handler.unary_stream

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
            call = enter(context)
            try:
                async for reply in inner_stream(request, context):
                    if call is None:
                        yield reply
                        continue
                    call.sending = True
                    yield reply
                    call.sending = False
            except asyncio.CancelledError:
                await _answer_revoked(call, context)
                raise
            finally:
                leave(call)

        make_stream = (
            grpc.stream_stream_rpc_method_handler
            if handler.stream_stream is not None
            else grpc.unary_stream_rpc_method_handler
        )
        return make_stream(streaming, handler.request_deserializer, handler.response_serializer)


async def _answer_revoked(call: OpenCall | None, context: grpc.aio.ServicerContext) -> None:
    """In the call's own task, cancelled by a revocation: answer UNAUTHENTICATED (raises
    AbortError). Any other cancel (the client went away, the server stops) goes on as it was."""
    if call is not None and call.revoked is not None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, call.revoked)


class Revoker:
    """The identity table's ``on_reload`` callback: ends what revoked identities opened."""

    def __init__(self, calls: OpenCalls, instances: Instances, grace: float = 1.0) -> None:
        self.calls = calls
        self.instances = instances
        self.grace = grace
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self.released = 0  # steps handed back so far (tests, logs)

    def __call__(self, revoked: frozenset[str]) -> None:
        """Called after a reload (in the thread that reloaded) with the names it revoked."""
        if not revoked:
            return
        at = self.instances.now()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._start(revoked, at)
        else:
            self._loop.call_soon_threadsafe(self._start, revoked, at)

    def _start(self, revoked: frozenset[str], at: int) -> None:
        task = self._loop.create_task(self.revoke(revoked, at))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait until every revocation started so far is done."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Stop the revocations in progress (the server stops)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def revoke(self, names: frozenset[str], reloaded_at: int) -> None:
        """End the calls of ``names``, then release the steps leased under them."""
        calls = self.calls.of(names)
        await asyncio.gather(*(self._end(call) for call in calls))
        if calls:
            waits = [asyncio.ensure_future(call.done.wait()) for call in calls]
            _, late = await asyncio.wait(waits, timeout=self.grace)
            for wait in late:
                wait.cancel()
        for name in sorted(names):
            mine = [call for call in calls if call.identity.name == name]
            prefix = owner_prefix(Identity(name, frozenset()))
            exact = {owner for call in mine for owner in call.owners if not owner.startswith(prefix)}
            released = await self._release(name, prefix, exact, reloaded_at)
            log.warning(
                "credential of %r revoked at the identity reload: %d call(s) ended, %d step(s) handed back",
                name,
                len(mine),
                released,
            )

    async def _end(self, call: OpenCall) -> None:
        """Stop the task serving the call; its wrapper answers it UNAUTHENTICATED."""
        message = REVOKED_MESSAGE.format(name=call.identity.name)
        call.revoked = message
        # Wait while gRPC is sending this stream's last reply: a cancel landing there would end
        # the call with no status at all (the client would wait out its deadline), and a status
        # sent from here meanwhile is refused (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS). Between
        # sends the task is in the handler, where CallTracker's wrapper turns the cancel into the
        # UNAUTHENTICATED answer, sent from the call's own task.
        for _ in range(_SEND_WAITS):
            if not call.sending or call.done.is_set():
                break
            await asyncio.sleep(_SEND_WAIT_SECONDS)
        if call.task is not None and not call.task.done():
            call.task.cancel()

    async def _release(self, name: str, prefix: str, exact: set[str], reloaded_at: int) -> int:
        """Hand back every step leased under ``name``: its ``<name>/`` owners (claimed up to the
        reload: a worker that reconnected with a new credential of the same name keeps what it
        claimed since), and the exact worker ids its streams polled under."""
        released = 0
        for owner_or_prefix, exactly in [(prefix, False)] + [(owner, True) for owner in sorted(exact)]:
            tried: set[str] = set()
            while True:
                page = await self.instances.store.leases_of(owner_or_prefix, _LEASE_PAGE)
                todo = [
                    (task_id, owner)
                    for task_id, owner, claimed_at in page
                    if task_id not in tried
                    and (owner == owner_or_prefix if exactly else claimed_at <= reloaded_at)
                ]
                for task_id, owner in todo:
                    tried.add(task_id)
                    released += await self._release_one(task_id, owner, name)
                if len(page) < _LEASE_PAGE or not todo:
                    break
        self.released += released
        return released

    async def _release_one(self, task_id: str, owner: str, name: str) -> int:
        """Release one lease (1), or 0 when it was settled meanwhile (reported, expired, cancelled)."""
        engine = self.instances.engine
        token_id = split_task_id(task_id)[0]
        why = f"credential of {name!r} revoked: the step was taken back from {owner!r}, no attempt used"

        def action(loaded: LoadedDefinition, state: InstanceState, now: int) -> tuple[None, Changes]:
            held = state.tokens.get(token_id)
            started = held.started_at if held is not None else now
            changes = engine.release(loaded, state, task_id, owner, why, now)  # refuses a settled lease
            token = changes.tokens[token_id]
            token.available_at = now  # not release's short delay: any other worker may claim it now
            changes.history.append(
                HistoryEntry(
                    instance_id=state.instance.id,
                    token_id=token_id,
                    node_id=token.node_id,
                    kind=token.kind,
                    attempt=token.attempt,
                    worker_id=owner,
                    started_at=started,
                    ended_at=now,
                    outcome=HistoryOutcome.RELEASED,
                    error=storable_text(why),
                )
            )
            return None, changes

        instance_id = token_instance_id(token_id)
        try:
            await self.instances.mutate(instance_id, f"instance {instance_id} does not exist", action)
        except WiggleError as exc:
            log.debug("revocation: %s not handed back: %s", task_id, exc)
            return 0
        return 1
