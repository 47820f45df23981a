"""Access control on the gRPC port: who is calling (interceptor), and what each call may touch.

``AuthInterceptor`` authenticates every call (a bearer token, or the verified client
certificate) and checks the method against its roles, a column of the routes table
(wiggle/_server/routes.py); the caller's identity then travels in a context variable to
``RequestGuard``, which the dispatcher (``RoutedService``, routes.py) runs on each request of
both services — the unary ones and each message of a WorkerSession stream alike — to check its
roles again (a stream carries several methods) and to scope worker calls, as their row says, to
the credential's queues and leases.

Each unknown credential a caller presents is counted against its address, on this port and the
HTTP port alike (wiggle/_server/auth_failures.py): past a few in a minute the address is
refused whatever it presents, and the failures are logged, a line per address per minute at most.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from .._security.roles import PUBLIC_METHODS, check_method, owner_prefix
from .._security.tokens import Identity, IdentityTable, Role
from .._wire.status import to_grpc
from ..errors import PermissionDenied, Unauthenticated, WiggleError
from .auth_failures import AuthFailures, Throttled, peer_address
from .routes import Route, Scope, allowed_roles

__all__ = ["AuthInterceptor", "Authenticator", "RequestGuard", "CALLER"]

#: The identity of the call being served (None: access control is off).
CALLER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("wiggle_caller", default=None)

#: With mTLS and no identity file, a verified client certificate is trusted with every role.
_CERTIFIED = frozenset({Role.ADMIN})


class Authenticator:
    """Turns what a caller presents into an Identity: a bearer token looked up in the identity
    file, else the common name of its verified client certificate."""

    def __init__(self, table: IdentityTable | None, mutual_tls: bool) -> None:
        if table is None and not mutual_tls:
            raise ValueError("access control needs an identity file (--auth-file) or client certificates")
        self.table = table
        self.mutual_tls = mutual_tls
        #: unknown credentials per address, shared by the gRPC and HTTP ports (auth_failures.py)
        self.failures = AuthFailures()

    def authenticate(
        self, authorization: str, common_name: str, address: Callable[[], str], where: str
    ) -> Identity:
        """``identify`` for a caller at ``address()`` (asked only when needed): Throttled while
        that address waits after too many unknown credentials, whatever it presents now; an
        unknown credential is counted and logged (``where``: which port or page) before its
        Unauthenticated goes on. A call with no credential at all guesses nothing: refused, not
        counted."""
        failures = self.failures
        if failures.any:
            refusal = failures.refusal(address(), where)
            if refusal:
                raise Throttled(refusal)
        try:
            return self.identify(authorization, common_name)
        except Unauthenticated as exc:
            presented = authorization or (f"certificate {common_name}" if common_name else "")
            if presented:
                failures.failed(address(), presented, str(exc), where)
            raise

    def identify(self, authorization: str, common_name: str) -> Identity:
        """The caller's identity; Unauthenticated (naming what is missing or wrong) otherwise."""
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("the authorization header must be 'Bearer <token>'")
            if self.table is None:
                raise Unauthenticated(
                    "this server takes no tokens (no --auth-file); use a client certificate"
                )
            found = self.table.by_token(token.strip())
            if found is None:
                raise Unauthenticated("the token is not known to this server (revoked or mistyped?)")
            return found
        if common_name:
            if self.table is None:
                return Identity(common_name, _CERTIFIED, frozenset({"*"}))
            found = self.table.by_certificate(common_name)
            if found is None:
                raise Unauthenticated(
                    f"client certificate {common_name!r} is not in the identity file; add a cert_cn entry"
                )
            return found
        raise Unauthenticated(
            "no credential: send a bearer token (WIGGLE_TOKEN) over TLS or a client certificate "
            "(WIGGLE_TLS_CLIENT_CERT / WIGGLE_TLS_CLIENT_KEY)"
        )


def _common_name(context: grpc.aio.ServicerContext) -> str:
    auth = context.auth_context() or {}
    names = auth.get("x509_common_name") or []
    return names[0].decode("utf-8", "replace") if names else ""


def _authorization(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == "authorization":
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authenticates each call and checks its method against the role table."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.authenticator = authenticator
        # method -> its wrapped handler: the wrapper holds nothing of one call, so it is built once
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def _admit(self, method: str, context: grpc.aio.ServicerContext) -> Identity:
        try:
            authorization = _authorization(context.invocation_metadata())
            # the certificate is looked at only when no token was sent
            common_name = "" if authorization else _common_name(context)
            identity = self.authenticator.authenticate(
                authorization, common_name, lambda: peer_address(context.peer()), "gRPC"
            )
            check_method(identity, method, allowed_roles(method))
        except WiggleError as exc:
            await context.abort(to_grpc(exc.code), str(exc))
            raise  # abort raises; this line is for the type checker
        return identity

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        refusal = self._refusal(method, details.invocation_metadata)
        if refusal is not None:
            return refusal
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None or method in PUBLIC_METHODS:
            return handler
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = wrapped
        return wrapped

    def _refusal(self, method: str, metadata: Any) -> grpc.RpcMethodHandler | None:
        """A call its metadata alone refuses (a token unknown or malformed, no credential where a
        client certificate cannot stand in, a role that may not call the method), answered
        before its request is read: a handler that never reads the request stream ends the call
        with the refusal. Else None: the call is admitted as before (``_admit``, which also
        reads a client certificate's name, known only to the call's context).

        Read first and refused after, a large request stayed in the server's memory until a
        full garbage collection: anyone who could reach the port grew it by the message size
        per call (64 MiB), with no credential (docs/security.md, "Serving a network")."""
        if method in PUBLIC_METHODS:
            return None
        authorization = _authorization(metadata)
        if not authorization and self.authenticator.mutual_tls:
            return None  # the verified certificate's name decides
        try:
            identity = self.authenticator.identify(authorization, "")
        except Unauthenticated as exc:
            # the peer's address is known to the call only: its refusal counts the token there
            return _refusing(exc, self._counting(authorization) if authorization else None)
        try:
            check_method(identity, method, allowed_roles(method))
        except WiggleError as exc:
            return _refusing(exc)
        return None  # _admit checks again, and whether the caller's address waits

    def _counting(self, authorization: str) -> Callable[[str, str], str]:
        """For the refusal of an unknown ``authorization``: the message to answer a caller at an
        address with (and the failure counted there, auth_failures.py)."""
        failures = self.authenticator.failures

        def count(address: str, message: str) -> str:
            refusal = failures.refusal(address, "gRPC")
            if refusal:  # a waiting address learns nothing about its guess
                return refusal
            failures.failed(address, authorization, message, "gRPC")
            return message

        return count

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        admit = self._admit
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Message, context: grpc.aio.ServicerContext) -> Message:
                reset = CALLER.set(await admit(method, context))
                try:
                    return await inner_uu(request, context)  # type: ignore[no-any-return]
                finally:
                    CALLER.reset(reset)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def stream_stream(
                requests: AsyncIterator[Message], context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Message]:
                CALLER.set(await admit(method, context))  # this call's own task: nothing to reset
                async for reply in inner_ss(requests, context):
                    yield reply

            return grpc.stream_stream_rpc_method_handler(
                stream_stream, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(
                request: Message, context: grpc.aio.ServicerContext
            ) -> AsyncIterator[Message]:
                CALLER.set(await admit(method, context))
                async for reply in inner_us(request, context):
                    yield reply

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )
        inner_su = handler.stream_unary

        async def stream_unary(
            requests: AsyncIterator[Message], context: grpc.aio.ServicerContext
        ) -> Message:
            reset = CALLER.set(await admit(method, context))
            try:
                return await inner_su(requests, context)  # type: ignore[no-any-return]
            finally:
                CALLER.reset(reset)

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, handler.request_deserializer, handler.response_serializer
        )


def _refusing(exc: WiggleError, count: Callable[[str, str], str] | None = None) -> grpc.RpcMethodHandler:
    """A handler that ends its call with ``exc``'s status without reading a request: a stream
    handler with no deserializer, whatever the method's own kind (on the wire a unary call is a
    stream of one message), so gRPC reads nothing of the request for it. ``count(address,
    message)``: an unknown credential's refusal, counted against the caller's address, answers
    the message it returns."""
    code, message = to_grpc(exc.code), str(exc)

    async def refuse(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        said = message if count is None else count(peer_address(context.peer()), message)
        await context.abort(code, said)
        yield  # pragma: no cover (abort raises: this makes the function a generator)

    return grpc.stream_stream_rpc_method_handler(refuse)


class RequestGuard:
    """Run by the dispatcher on each request: the caller's roles against the route's, and, for a
    worker call (``Route.scope``), a worker credential polls only its queues, under a worker id
    prefixed with its own name, and reports only on leases held under it."""

    def __call__(self, route: Route[Any, Message], request: Message) -> None:
        identity = CALLER.get()
        if identity is None or Role.ADMIN in identity.roles:
            return
        check_method(identity, route.name, route.roles)  # a stream carries several methods
        scope = route.scope
        if scope is None:
            return
        prefix = owner_prefix(identity)
        if scope is Scope.QUEUES:
            denied = [q for q in request.queues if not identity.may_serve(q)]  # type: ignore[attr-defined]
            if denied:
                allowed = [q for q in request.queues if identity.may_serve(q)]  # type: ignore[attr-defined]
                hint = (
                    f": give this worker only those it may (--queues {','.join(allowed)})"
                    if allowed
                    else ": serve its queues with a credential allowed them (the identity file's queues)"
                )
                raise PermissionDenied(
                    f"worker credential {identity.name!r} may serve queues {sorted(identity.queues)}; "
                    f"not {denied}{hint}"
                )
            worker_id: str = request.worker_id  # type: ignore[attr-defined]
            if not worker_id.startswith(prefix):
                request.worker_id = prefix + worker_id  # type: ignore[attr-defined]
            return
        owner: str = request.lease_owner  # type: ignore[attr-defined]
        if not owner.startswith(prefix):
            raise PermissionDenied(
                f"lease_owner {owner[:80]!r} is not a lease of worker credential {identity.name!r}; "
                "report only the tasks this worker claimed"
            )
        # a report asking for its next step (next_queues: CompleteTask, AdvanceRun) takes it as a
        # poll would
        denied = [q for q in getattr(request, "next_queues", ()) if not identity.may_serve(q)]
        if denied:
            raise PermissionDenied(
                f"worker credential {identity.name!r} may serve queues {sorted(identity.queues)}; "
                f"not {denied} (next_queues)"
            )
