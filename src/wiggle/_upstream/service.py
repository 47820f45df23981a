"""Upstream Wiggle's gRPC service, ``dev.wiggle.proto.WiggleControlPlane``, over our instance layer.

Clients and workers written for upstream Wiggle (PyPI ``wiggle-client``, its Java client) call
this service on the same server and port as ours; it translates their messages and calls the
same instance layer (wiggle/_server/instances.py) our service calls: one engine, one store,
one cluster. What is translated, and where upstream and we differ, is in docs/upstream.md.
The proto is vendored from wiggle-client 0.1.1 (proto/wiggle/_rpc/upstream/ORIGIN).

Its RPCs are rows of the same routes table as ours (``ROUTES``, wiggle/_server/routes.py), served
by the same dispatcher (``RoutedService``: the guard, errors as status codes, the counters, here
as ``upstream.<method>``); the handlers are in wiggle/_upstream/handlers.py.
"""

from __future__ import annotations

from collections.abc import Callable

from .._rpc.upstream import wiggle_pb2 as upb
from .._server.instances import Instances
from .._server.pollers import Pollers
from .._server.routes import UPSTREAM, RoutedService
from .._server.service import Metrics
from .._server.service_limits import ServiceLimits
from .handlers import UpstreamHandlers
from .versions import Versions

__all__ = ["UpstreamControlPlane", "SERVICE_NAME", "METHOD_PREFIX"]

SERVICE_NAME = "dev.wiggle.proto.WiggleControlPlane"
METHOD_PREFIX = UPSTREAM


class UpstreamControlPlane(UpstreamHandlers, RoutedService):
    """The upstream protocol over ``instances``; errors become statuses as in our own service."""

    descriptor = upb.DESCRIPTOR.services_by_name["WiggleControlPlane"]
    metric_prefix = "upstream."

    def __init__(
        self,
        instances: Instances,
        pollers: Pollers,
        metrics: Metrics | None = None,
        limits: ServiceLimits | None = None,
        node_id: Callable[[], str] | None = None,
    ) -> None:
        self.instances = instances
        self.pollers = pollers  # shared with our service: one view of who polls (dashboard)
        self.metrics = metrics or Metrics()
        self.limits = limits or ServiceLimits.from_config(instances.config)
        self.versions = Versions(instances)
        self.node_id = node_id or (lambda: "wiggle")
        #: run on every request before its handler (worker scoping: wiggle/_server/guard.py)
        self.guard = None
        self.stopping = lambda: False  # the server sets its own (draining)
        self.bind_routes()
