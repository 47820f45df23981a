"""The RPCs of both gRPC services in one table, and the one dispatcher that serves them.

``ROUTES`` has one row per RPC of wiggle.v1.WiggleControlPlane (ours) and of
dev.wiggle.proto.WiggleControlPlane (upstream Wiggle's: wiggle/_upstream/service.py): its full
method name, its handler (an attribute path on the service object), the roles that may call it
(wiggle/_security/roles.py), its kind, and the scope of a worker call. Everything else about an
RPC is derived from the row and the service descriptor in wiggle/_rpc:

- the gRPC entry points: ``RoutedService.bind_routes`` gives the service one attribute per
  method of its descriptor, which wiggle/_server/decoding.py ``add_service`` registers;
- the dispatch table ``routes`` (method name -> ``Route``, request type from the descriptor),
  used by the unary calls and by each message of the WorkerSession stream (session.py);
- access control: ``allowed_roles`` for the interceptor, ``Route.roles`` and ``Route.scope`` for
  ``RequestGuard`` (wiggle/_server/guard.py).

One dispatcher (``RoutedService._run``) serves both services: the guard, the handler, the call and
error counters and the latency histogram (``Metrics``, upstream's as ``upstream.<method>``); ``_serve`` adds the caller's
trace context and turns an error into a status in one place (faults.py, wiggle/_wire/status.py).
A method of a descriptor without a row (or a row without its method or handler) stops the
service from being built; tests/server/test_routes.py checks the table against both descriptors.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from operator import attrgetter
from time import perf_counter
from typing import TYPE_CHECKING, Any, ClassVar, Generic, NamedTuple, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message

from .. import _tracing as tracing
from .._security.roles import ADMIN_ONLY, CLIENTS, READERS, WORKERS
from .._security.tokens import Role
from .._wire.status import not_applied_metadata, to_grpc
from ..errors import InvalidArgument
from .faults import status_of

if TYPE_CHECKING:
    from .service import Metrics

__all__ = [
    "Kind",
    "Scope",
    "Rpc",
    "Route",
    "ROUTES",
    "OURS",
    "UPSTREAM",
    "RPC_ROLES",
    "UPSTREAM_RPC_ROLES",
    "allowed_roles",
    "RoutedService",
]

Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message, covariant=True)


class Kind(enum.Enum):
    """How an RPC is served."""

    UNARY = "unary"  # one request, one reply: through the dispatcher
    STREAM = "stream"  # a stream (WorkerSession): the handler serves the call itself


class Scope(enum.Enum):
    """What a worker credential may touch in a worker call (RequestGuard, wiggle/_server/guard.py)."""

    QUEUES = "queues"  # a poll: only the credential's queues, under a worker id prefixed with its name
    LEASE = "lease"  # a report: only on a lease held under the credential's name


class Rpc(NamedTuple):
    """One row of the routes table."""

    method: str  # the full gRPC method name: /<package>.<Service>/<Method>
    handler: str  # the attribute path of its handler on the service object
    roles: frozenset[Role]  # who may call it (admin among them)
    kind: Kind = Kind.UNARY
    scope: Scope | None = None  # a worker call: what the credential may touch

    @property
    def service(self) -> str:
        """The full name of the service the RPC belongs to."""
        return self.method.split("/")[1]

    @property
    def name(self) -> str:
        """The method's name in its service."""
        return self.method.rsplit("/", 1)[-1]


OURS = "/wiggle.v1.WiggleControlPlane/"
UPSTREAM = "/dev.wiggle.proto.WiggleControlPlane/"
_ANY = READERS | WORKERS

#: Every RPC of both services (the order is the .proto's).
ROUTES: tuple[Rpc, ...] = (
    # ours: definitions
    Rpc(OURS + "RegisterWorkflow", "register_workflow", ADMIN_ONLY),
    Rpc(OURS + "GetWorkflow", "get_workflow", _ANY),
    Rpc(OURS + "ListWorkflows", "list_workflows", READERS),
    # ours: instances
    Rpc(OURS + "StartInstance", "start_instance", CLIENTS),
    Rpc(OURS + "StartInstances", "start_instances", CLIENTS),
    Rpc(OURS + "GetInstance", "get_instance", READERS),
    Rpc(OURS + "ListInstances", "list_instances", READERS),
    Rpc(OURS + "CancelInstance", "cancel_instance", ADMIN_ONLY),
    Rpc(OURS + "SignalInstance", "signal_instance", CLIENTS),
    Rpc(OURS + "RetryInstance", "retry_instance", ADMIN_ONLY),
    Rpc(OURS + "CompleteUserTask", "complete_user_task", CLIENTS),
    Rpc(OURS + "GetHistory", "get_history", READERS),
    Rpc(OURS + "ListQueues", "list_queues", READERS),
    Rpc(OURS + "SetQueueLimit", "set_queue_limit", ADMIN_ONLY),
    # ours: workers
    Rpc(OURS + "PollTasks", "poll_tasks", WORKERS, scope=Scope.QUEUES),
    Rpc(OURS + "CompleteTask", "complete_task", WORKERS, scope=Scope.LEASE),
    Rpc(OURS + "FailTask", "fail_task", WORKERS, scope=Scope.LEASE),
    Rpc(OURS + "HeartbeatTask", "heartbeat_task", WORKERS, scope=Scope.LEASE),
    Rpc(OURS + "AdvanceRun", "advance_run", WORKERS, scope=Scope.LEASE),
    Rpc(OURS + "WorkerSession", "worker_session", WORKERS, Kind.STREAM),  # each message as its RPC
    # any caller may open it; each message is checked as its RPC (a viewer's start is refused
    # as a StartInstances call, naming it)
    Rpc(OURS + "ClientSession", "client_session", _ANY, Kind.STREAM),
    # ours: schedules (reads for client and viewer, every change admin only)
    Rpc(OURS + "CreateSchedule", "schedule_handlers.create", ADMIN_ONLY),
    Rpc(OURS + "UpdateSchedule", "schedule_handlers.update", ADMIN_ONLY),
    Rpc(OURS + "GetSchedule", "schedule_handlers.get", READERS),
    Rpc(OURS + "ListSchedules", "schedule_handlers.list", READERS),
    Rpc(OURS + "PauseSchedule", "schedule_handlers.pause", ADMIN_ONLY),
    Rpc(OURS + "ResumeSchedule", "schedule_handlers.resume", ADMIN_ONLY),
    Rpc(OURS + "DeleteSchedule", "schedule_handlers.delete", ADMIN_ONLY),
    Rpc(OURS + "TriggerSchedule", "schedule_handlers.trigger", ADMIN_ONLY),
    # upstream Wiggle's (docs/upstream.md): as ours where both have the method
    Rpc(UPSTREAM + "HealthCheck", "health_check", _ANY),
    Rpc(UPSTREAM + "GetCluster", "get_cluster", READERS),
    Rpc(UPSTREAM + "ListWorkflows", "list_workflows", READERS),
    Rpc(UPSTREAM + "RegisterWorkflow", "register_workflow", ADMIN_ONLY),
    Rpc(UPSTREAM + "GetWorkflow", "get_workflow", _ANY),
    Rpc(UPSTREAM + "StartInstance", "start_instance", CLIENTS),
    Rpc(UPSTREAM + "ListInstances", "list_instances", READERS),
    Rpc(UPSTREAM + "GetInstance", "get_instance", READERS),
    Rpc(UPSTREAM + "CancelInstance", "cancel_instance", ADMIN_ONLY),
    Rpc(UPSTREAM + "SignalInstance", "signal_instance", CLIENTS),
    Rpc(UPSTREAM + "CreateSchedule", "create_schedule", ADMIN_ONLY),
    Rpc(UPSTREAM + "ListSchedules", "list_schedules", READERS),
    Rpc(UPSTREAM + "DeleteSchedule", "delete_schedule", ADMIN_ONLY),
    Rpc(UPSTREAM + "PollTasks", "poll_tasks", WORKERS, scope=Scope.QUEUES),
    Rpc(UPSTREAM + "CompleteTask", "complete_task", WORKERS, scope=Scope.LEASE),
    Rpc(UPSTREAM + "FailTask", "fail_task", WORKERS, scope=Scope.LEASE),
    Rpc(UPSTREAM + "HeartbeatTask", "heartbeat_task", WORKERS, scope=Scope.LEASE),
    Rpc(UPSTREAM + "AdvanceRun", "advance_run", WORKERS, scope=Scope.LEASE),
)

#: The roles column: full method name -> who may call it.
ROLES: dict[str, frozenset[Role]] = {row.method: row.roles for row in ROUTES}
#: The same by method name, per service.
RPC_ROLES: dict[str, frozenset[Role]] = {r.name: r.roles for r in ROUTES if r.method.startswith(OURS)}
UPSTREAM_RPC_ROLES: dict[str, frozenset[Role]] = {
    r.name: r.roles for r in ROUTES if r.method.startswith(UPSTREAM)
}


def allowed_roles(method: str) -> frozenset[Role]:
    """The roles that may call ``method``: a full /package.Service/Method path, or a bare name
    of our service. A method with no row is admin-only, so a new RPC is closed until it has one."""
    return ROLES.get(method if method.startswith("/") else OURS + method, ADMIN_ONLY)


class Route(Generic[Req, Rep]):
    """A row bound to one service object: the request type its method takes and its handler,
    with what the dispatcher needs of the row (roles, scope, the counters' key)."""

    __slots__ = ("request", "handler", "name", "roles", "scope", "metric")

    def __init__(
        self,
        request: type[Req],
        handler: Callable[[Req], Awaitable[Rep]],
        name: str = "",
        roles: frozenset[Role] = ADMIN_ONLY,
        scope: Scope | None = None,
        metric: str = "",
    ) -> None:
        self.request = request
        self.handler = handler
        self.name = name or request.__name__
        self.roles = roles
        self.scope = scope
        self.metric = metric or self.name

    async def __call__(self, request: Message) -> Rep:
        """Run the handler on ``request``, which must be of the route's request type."""
        if not isinstance(request, self.request):
            raise InvalidArgument(f"expected a {self.request.__name__}, got a {type(request).__name__}")
        return await self.handler(request)


#: Run on every request before its handler (worker scoping: wiggle/_server/guard.py RequestGuard).
Guard = Callable[[Route[Any, Message], Message], None]


class RoutedService:
    """A gRPC service served from its rows of ``ROUTES``: a base of ControlPlane
    (wiggle/_server/service.py) and UpstreamControlPlane (wiggle/_upstream/service.py), which
    set ``descriptor`` and call ``bind_routes`` once their handlers' state is set."""

    descriptor: ClassVar[ServiceDescriptor]
    metric_prefix: ClassVar[str] = ""  # before the method name in the call and error counters
    metrics: Metrics
    guard: Guard | None
    routes: dict[str, Route[Any, Message]]  # the unary methods, by name

    def bind_routes(self) -> None:
        """Build ``routes`` and one gRPC entry point per method of ``descriptor`` (an attribute
        named as the method); LookupError when the table and the descriptor disagree."""
        prefix = f"/{self.descriptor.full_name}/"
        rows = {row.name: row for row in ROUTES if row.method.startswith(prefix)}
        methods = self.descriptor.methods_by_name
        if set(rows) != set(methods):
            raise LookupError(
                f"{self.descriptor.full_name}: methods without a row in ROUTES "
                f"{sorted(set(methods) - set(rows))}, rows without a method {sorted(set(rows) - set(methods))}"
            )
        self.routes = {}
        for method in self.descriptor.methods:
            row = rows[method.name]
            handler = attrgetter(row.handler)(self)
            streaming = method.client_streaming or method.server_streaming
            if streaming != (row.kind is Kind.STREAM):
                raise LookupError(f"{row.method}: the row says {row.kind.value}, the descriptor does not")
            if row.kind is Kind.STREAM:
                setattr(self, method.name, handler)
                continue
            request = message_factory.GetMessageClass(method.input_type)
            route: Route[Any, Message] = Route(
                request, handler, row.name, row.roles, row.scope, self.metric_prefix + row.name
            )
            self.routes[method.name] = route
            setattr(self, method.name, self._entry(route))

    def _entry(self, route: Route[Any, Message]) -> Callable[[Message, grpc.aio.ServicerContext], Any]:
        serve = self._serve

        async def entry(request: Message, context: grpc.aio.ServicerContext) -> Message:
            return await serve(route, request, context)

        entry.__name__ = entry.__qualname__ = route.name
        return entry

    async def _serve(
        self, route: Route[Any, Message], request: Message, context: grpc.aio.ServicerContext
    ) -> Message:
        """A unary call: the dispatcher, then an error as the call's status."""
        if tracing.active():  # the caller's trace context, for the handler's span (each call is a task)
            tracing.set_incoming(context.invocation_metadata())
        try:
            return await self._run(route, request)
        except Exception as exc:  # CancelledError is a BaseException and passes through
            code, message = status_of(exc, route.metric)
            trailing = not_applied_metadata(exc)
        await context.abort(to_grpc(code), message, trailing)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    async def dispatch(self, method: str, request: Message) -> Message:
        """Run the unary method ``method`` on ``request`` (a WorkerSession message: session.py);
        a WiggleError propagates to the caller."""
        return await self._run(self.routes[method], request)

    async def _run(self, route: Route[Any, Message], request: Message) -> Message:
        """The one dispatcher: count the call, guard it, run its handler (counting an error), and
        time it (wiggle_rpc_duration_seconds: guard and handler, a long poll's wait included)."""
        metrics = self.metrics
        metrics.rpc_calls[route.metric] += 1
        started = perf_counter()
        try:
            if self.guard is not None:
                self.guard(route, request)
            return await route(request)
        except Exception:
            metrics.rpc_errors[route.metric] += 1
            raise
        finally:
            metrics.rpc_seconds.observe((route.metric,), perf_counter() - started)
