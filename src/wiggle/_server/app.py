"""The server process: a grpc.aio server, the clock duties, health and metrics, graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .._client import hosting
from .._clock import Clock
from .._engine.engine import Engine, EngineConfig
from .._rpc import wiggle_pb2 as pb
from .._rpc.upstream import wiggle_pb2 as upstream_pb
from .._storage.base import Store
from .._storage.memory import MemoryStore
from .._upstream.service import UpstreamControlPlane
from .._urls import bare_host, host_address
from ..errors import FailedPrecondition
from .config import ServerConfig, context_fields
from .decoding import add_service
from .exposure import Security, build_security
from .guard import AuthInterceptor, RequestGuard
from .http_port import HttpPort, open_http_port
from .http_security import HttpSecurity
from .instances import Instances
from .lag import QueueLagMonitor
from .metrics_sampler import MetricsSampler
from .process import describe, tune_collector
from .revocation import CallTracker, OpenCalls, Revoker
from .service import ControlPlane, Metrics

__all__ = ["WiggleServer", "make_store", "serve"]

log = logging.getLogger("wiggle.server")

SERVICE_NAME = "wiggle.v1.WiggleControlPlane"
UPSTREAM_SERVICE_NAME = "dev.wiggle.proto.WiggleControlPlane"
MAX_MESSAGE_BYTES = 64 << 20


def engine_config(config: ServerConfig) -> EngineConfig:
    """The engine's share of the server settings."""
    return EngineConfig(
        lease_millis=config.lease_millis,
        max_lease_millis=config.max_lease_millis,
        execution_mode=config.execution_mode,
        max_local_steps=config.max_local_steps,
        max_payload_bytes=config.max_payload_bytes,
        max_instance_steps=config.max_instance_steps,
        join_diffs=config.join_diffs,
    )


def make_store(config: ServerConfig) -> Store:
    """The in-memory store, or the PostgreSQL store when a database URL is set.

    Raises FailedPrecondition (which the CLI turns into its exit status) when a database URL is
    set but the PostgreSQL driver is not installed.
    """
    if not config.database_url:
        return MemoryStore(config.max_live_instances, config.max_memory_bytes)
    try:
        from .._storage.postgres import PostgresStore
    except ImportError as exc:
        raise FailedPrecondition(
            f"WIGGLE_DATABASE_URL is set but the PostgreSQL driver is missing ({exc}); "
            "pip install 'wiggle-workflows[postgres]'"
        ) from None
    return PostgresStore(
        config.database_url,
        schema=config.database_schema,
        pool_size=config.pool_size,
        context_search_fields=context_fields(config),
        group_commits=config.group_commits,
        stall_timeout=config.stall_timeout_millis / 1000,
    )


class WiggleServer:
    """One server process. ``await start()``, then ``await stop()``."""

    def __init__(
        self,
        config: ServerConfig | None = None,
        store: Store | None = None,
        engine: Engine | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or ServerConfig()
        self.engine = engine if engine is not None else Engine(engine_config(self.config))
        self.store = store or make_store(self.config)
        self.metrics = Metrics()
        self.instances = Instances(self.store, self.engine, clock)
        self.service = ControlPlane(self.instances, self.metrics)
        # upstream Wiggle's protocol on the same port, over the same instance layer (docs/upstream.md)
        self.upstream = UpstreamControlPlane(
            self.instances, self.service.pollers, self.metrics, self.service.limits, lambda: self.target
        )
        self.port = 0
        self.upstream_port = 0  # the second port, when config.upstream_port is set
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = asyncio.Event()
        self.upstream.stopping = self._stopping.is_set
        self._metrics_server: Any = None
        self.security: Security | None = None  # built at start (wiggle/_server/exposure.py)
        self._http: HttpPort | None = None  # the HTTP port (dashboard, /metrics), if configured
        self.http_security: HttpSecurity | None = None  # TLS and access control of the HTTP port
        self.open_calls = OpenCalls()  # authenticated calls in progress (revocation.py)
        self.revoker: Revoker | None = None  # ends a revoked identity's calls and leases, at reload
        c = self.config
        self.lag = QueueLagMonitor(
            self.store,
            c.queue_lag_warn_millis,
            c.queue_lag_clear_millis or c.queue_lag_warn_millis // 2,
            c.queue_lag_interval_millis / 1000,
            self.service.pollers.dispatched,
        )
        # the store's share of /metrics (running instances, the definitions' queues)
        self.sampler = MetricsSampler(self.store, 3 * c.queue_lag_interval_millis / 1000)

    def serving(self) -> bool:
        """The gRPC port is up and the server is not stopping (/readyz)."""
        return self._server is not None and not self._stopping.is_set()

    @property
    def http_port(self) -> int:
        """The bound HTTP port (dashboard, /metrics), 0 if none."""
        return self._http.port if self._http is not None else 0

    @property
    def target(self) -> str:
        """host:port to connect to."""
        return host_address(self.config.host, self.port)

    async def start(self) -> int:
        """Open the store, bind, start serving and the clock duties; returns the bound port.

        Refuses (FailedPrecondition) a non-loopback bind without TLS and authentication unless
        ``config.insecure``; loads the TLS and identity files first, so a bad file stops the start.
        A start that fails part-way (the HTTP port in use, say) stops what it had started: the
        gRPC port it had opened no longer answers, and the store is closed.
        """
        try:
            return await self._start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop(grace=0)
            raise

    async def _start(self) -> int:
        security = self.security = build_security(self.config)
        await self.store.open()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 1 if self.config.processes > 1 or self.config.reuse_port else 0),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ]
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if security.authenticator is not None:
            interceptors.append(AuthInterceptor(security.authenticator))
            self.service.guard = self.upstream.guard = RequestGuard()
            if security.identities is not None:  # revocation at reload (docs/security.md)
                interceptors.append(CallTracker(self.open_calls))
                self.revoker = Revoker(self.open_calls, self.instances)
                security.identities.on_reload(self.revoker)
        server = grpc.aio.server(options=options, interceptors=interceptors)
        # as the generated add_..._to_server would, but refusing undecodable requests with
        # INVALID_ARGUMENT (wiggle/_server/decoding.py)
        add_service(server, pb.DESCRIPTOR.services_by_name["WiggleControlPlane"], self.service)
        add_service(server, upstream_pb.DESCRIPTOR.services_by_name["WiggleControlPlane"], self.upstream)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self.port = _bind(
            server, security, host_address(self.config.host, self.config.port), "--port, WIGGLE_PORT"
        )
        if self.config.upstream_port:  # a second port, e.g. upstream Wiggle's 8080 (docs/upstream.md)
            extra = host_address(self.config.host, self.config.upstream_port)
            self.upstream_port = _bind(server, security, extra, "--upstream-port, WIGGLE_UPSTREAM_PORT")
        await server.start()
        self._server = server
        await _set_health(self._health, "", health_pb2.HealthCheckResponse.SERVING)
        await _set_health(self._health, SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await _set_health(self._health, UPSTREAM_SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        # a blocking Client called on this loop would wait for this server forever: it asks first
        hosting.hosted(
            asyncio.get_running_loop(),
            self,
            hosting.Hosted(bare_host(str(self.config.host)), (self.port, self.upstream_port)),
        )
        self._tasks.append(asyncio.ensure_future(self.instances.clock_loop(self._stopping)))
        self._tasks.append(asyncio.ensure_future(self.lag.run(self._stopping)))
        self._tasks.append(asyncio.ensure_future(self.sampler.run(self._stopping)))
        self._tasks.append(
            asyncio.ensure_future(
                self.instances.purge_loop(
                    self._stopping, self.config.retention_seconds, self.config.purge_interval_seconds
                )
            )
        )
        if security.tls is not None or security.identities is not None:
            self._tasks.append(asyncio.ensure_future(self._reload_loop(security)))
        if self.config.http_port:
            self.http_security = HttpSecurity(security.tls, security.authenticator, self.config.open_metrics)
            self._http = await _open_http(self)
        log.info(
            "wiggle server on %s (%s store, default mode %s%s)",
            self.target,
            "postgres" if self.config.database_url else "memory",
            self.config.execution_mode.value,
            # a rolling switch needs to see which servers have it (docs/upgrading.md#compact-joins)
            ", join diffs on" if self.config.join_diffs else "",
        )
        node = getattr(self.instances.store, "node_id", "")
        if node:  # the id /api/cluster, the Cluster page and the clock-duty lines name it by
            log.info("this node is %s (gRPC %s)", node, self.target)
        return self.port

    async def _reload_loop(self, security: Security) -> None:
        # gRPC re-reads changed certificates at each handshake by itself; this loop keeps the
        # HTTP port's certificate and the identity file current
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), max(self.config.reload_seconds, 0.1))
            security.reload_if_changed()

    def reload(self) -> None:
        """Re-read the certificate and identity files now (what SIGHUP does)."""
        if self.security is not None:
            self.security.reload_if_changed(force=True)

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls, let in-flight ones finish for up to ``grace`` seconds, close the store."""
        self._stopping.set()
        hosting.hosted(asyncio.get_running_loop(), self, None)
        await _set_health(self._health, "", health_pb2.HealthCheckResponse.NOT_SERVING)
        self.service.let_go()  # streams, polls and waits end; only calls in flight are waited for
        if self._server is not None:
            await self._server.stop(grace)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.revoker is not None:
            await self.revoker.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self._http is not None:
            await self._http.close()
            self._http = None
        await self.store.close()

    async def wait(self) -> None:
        """Block until the gRPC server terminates."""
        if self._server is not None:
            await self._server.wait_for_termination()


async def _set_health(servicer: Any, service: str, status: Any) -> None:
    result = servicer.set(service, status)
    if asyncio.iscoroutine(result):
        await result


async def serve(config: ServerConfig, ready: Any = None) -> None:
    """Run a server until SIGINT/SIGTERM, then stop gracefully."""
    server = WiggleServer(config)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError, AttributeError):  # no SIGHUP on Windows
        loop.add_signal_handler(signal.SIGHUP, server.reload)
    tune_collector(config.gc_threshold)  # this process is the server's own (process.py)
    log.info("process: %s", describe())
    if ready is not None:  # after the handlers: a SIGTERM right after "listening" stops gracefully
        ready(server)
    await stop.wait()
    grace = config.stop_grace_seconds
    log.info("stopping (calls in flight get up to %g s)", grace)
    started = time.monotonic()
    await server.stop(grace)
    log.info("stopped in %.2f s", time.monotonic() - started)


async def _open_http(server: WiggleServer) -> HttpPort | None:
    """``open_http_port``, with a port that cannot be had FailedPrecondition naming it and
    --http-port, as ``_bind`` says of the gRPC ports and the worker of its own
    (wiggle/_worker/http.py): an OSError from aiohttp's (or prometheus-client's) bind was a
    25-line traceback and exit 1, where docs/cli.md promises one line and exit 4."""
    try:
        return await open_http_port(server)
    except OSError as exc:
        host, port = server.config.host, server.config.http_port
        why = {
            errno.EADDRINUSE: "the port is in use (another wiggle server?)",
            errno.EACCES: "the port is not allowed",
            errno.EADDRNOTAVAIL: f"{bare_host(host)} is not an address of this host",
        }.get(exc.errno or 0, os.strerror(exc.errno) if exc.errno else str(exc))
        raise HttpPortUnavailable(host_address(host, port), why) from None


class HttpPortUnavailable(FailedPrecondition):
    """The HTTP port cannot listen at ``address`` (``why``): said naming the settings that chose
    it, --http-port and --host; ``wiggle demo`` says it of its dashboard port, --dashboard-port."""

    def __init__(
        self,
        address: str,
        why: str,
        settings: str = "--http-port, WIGGLE_HTTP_PORT; --host, WIGGLE_HOST",
        what: str = "the HTTP port",
    ) -> None:
        super().__init__(f"{what} cannot listen on {address}: {why}; choose another ({settings})")
        self.address = address
        self.why = why


def _bind(server: grpc.aio.Server, security: Security, address: str, setting: str) -> int:
    """Listen on ``address``; the port bound. A port that cannot be had (in use, not ours) is
    FailedPrecondition naming it and the setting that chose it, not gRPC's RuntimeError."""
    try:
        if security.tls is not None:
            port = server.add_secure_port(address, security.tls.grpc_credentials())
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise FailedPrecondition(
            f"cannot listen on {address}: the port is in use (another wiggle server?) or not allowed; "
            f"choose another ({setting})"
        )
    return int(port)
