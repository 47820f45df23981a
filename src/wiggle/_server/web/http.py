"""The server's HTTP port: /metrics, /healthz, /readyz, the dashboard and its JSON API.

An aiohttp application on the server's own event loop (the ``dashboard`` extra), so the pages
read the instance layer directly, with no second process or thread. Routes (docs/dashboard.md):

    GET  /healthz  /readyz  /metrics
    GET  /instances  /instances/{id}  /workflows  /queues  /cluster          (HTML)
    GET  /api/instances  /api/instances/{id}  /api/workflows  /api/queues  /api/cluster
    POST /api/instances/{id}/cancel              {"actor": "...", "reason": "..."}
    POST /api/instances/{id}/user-tasks/{name}   {"actor": "...", "data": {...}}
    POST /api/instances/{id}/signals/{name}      {"actor": "...", "data": {...}}
    POST /api/instances/{id}/retry               {"actor": "...", "from_node": ""}
    GET  /schedules  /api/schedules                                         (HTML, JSON)
    POST /api/schedules/{id}/pause|resume|trigger {"actor": "..."}

A page requested with the header ``X-Fragment: 1`` answers its ``<main>`` content only (the
pages' refresh). Errors answer ``{"error": message, "code": ErrorCode}`` with an HTTP status.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from aiohttp import web

from ..._model import validate_name
from ..._security.tokens import Role
from ...errors import ErrorCode, InvalidArgument, WiggleError
from ..http_security import HttpSecurity, http_status, peer_common_name
from ..instances import Instances
from . import actions, api, pages, schedules

__all__ = ["HttpSide", "HTTP_STATUS"]

log = logging.getLogger("wiggle.http")

HTTP_STATUS = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.FAILED_PRECONDITION: 409,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.UNAUTHENTICATED: 401,
}
MAX_ACTOR_CHARS = 100

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except WiggleError as exc:
        status = HTTP_STATUS.get(exc.code, 500)
        if request.path.startswith("/api/") or status >= 500:
            return web.json_response({"error": str(exc), "code": exc.code.value}, status=status)
        body = pages.layout("error", "", f'<h2>{status}</h2><p class="err">{_esc(str(exc))}</p>')
        return web.Response(text=body, status=status, content_type="text/html")


def _esc(text: str) -> str:
    from html import escape

    return escape(text)


#: the authenticated caller's name on a request (set by the access middleware)
IDENTITY = web.RequestKey("identity", str)


def _access(
    security: HttpSecurity,
) -> Callable[[web.Request, Handler], Coroutine[Any, Any, web.StreamResponse]]:
    """Middleware: the caller's credential checked against HTTP_ROLES (wiggle/_security/roles.py).

    Reading needs a role the path allows; anything else (cancel, complete a user task) is an
    operator action and needs the admin role. The acting identity's name replaces the ``actor``
    a form sends, so the history records who really did it.
    """

    @web.middleware
    async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        try:
            identity = security.check(
                request.path, request.headers.get("Authorization", ""), peer_common_name(peer)
            )
        except WiggleError as exc:
            return web.json_response({"error": str(exc), "code": exc.code.value}, status=http_status(exc))
        if request.method not in ("GET", "HEAD") and identity is not None:
            if Role.ADMIN not in identity.roles:
                message = f"{identity.name} may not {request.method} {request.path}: needs the admin role"
                return web.json_response({"error": message, "code": "PERMISSION_DENIED"}, status=403)
            request[IDENTITY] = identity.name
        return await handler(request)

    return access


class HttpSide:
    """The HTTP port of one server process; ``await start(host, port)``, ``await stop()``."""

    def __init__(
        self,
        instances: Instances,
        sources: api.Sources,
        metrics_text: Callable[[], bytes] | None,
        serving: Callable[[], bool],
        security: HttpSecurity | None = None,
    ) -> None:
        self.security = security  # TLS and roles (wiggle/_server/http_security.py); None: open
        self.instances = instances
        self.sources = sources
        self.metrics_text = metrics_text
        self.serving = serving  # False before the gRPC port is up and once the server stops
        self.port = 0
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        """The aiohttp application (routes above)."""
        limit = self.instances.config.max_payload_bytes + 64 * 1024
        middlewares: list[Any] = [_errors]  # aiohttp's Middleware; ours are plain coroutine functions
        if self.security is not None and self.security.authenticator is not None:
            middlewares.insert(0, _access(self.security))
        app = web.Application(middlewares=middlewares, client_max_size=limit)
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/metrics", self.metrics)
        r.add_get("/", self.root)
        r.add_get("/instances", self.page(self._instances_data, pages.instances_html, "instances"))
        r.add_get("/instances/{id}", self.page(self._instance_data, pages.instance_html, "instances"))
        r.add_get("/workflows", self.page(self._workflows_data, pages.workflows_html, "workflows"))
        r.add_get("/queues", self.page(self._queues_data, pages.queues_html, "queues"))
        r.add_get("/cluster", self.page(self._cluster_data, pages.cluster_html, "cluster"))
        r.add_get("/schedules", self.page(self._schedules_data, schedules.schedules_html, "schedules"))
        r.add_get("/api/instances", self.json(self._instances_data))
        r.add_get("/api/instances/{id}", self.json(self._instance_data))
        r.add_get("/api/workflows", self.json(self._workflows_data))
        r.add_get("/api/queues", self.json(self._queues_data))
        r.add_get("/api/cluster", self.json(self._cluster_data))
        r.add_get("/api/schedules", self.json(self._schedules_data))
        r.add_post("/api/instances/{id}/cancel", self.cancel)
        r.add_post("/api/instances/{id}/user-tasks/{name}", self.complete_user_task)
        r.add_post("/api/instances/{id}/signals/{name}", self.signal)
        r.add_post("/api/instances/{id}/retry", self.retry)
        r.add_post("/api/schedules/{id}/{action}", self.schedule_action)
        return app

    async def start(self, host: str, port: int) -> int:
        """Bind and serve on the running loop; the bound port (``port`` 0 picks one)."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        context = self.security.ssl_context() if self.security is not None else None
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        server = site._server  # noqa: SLF001 - aiohttp exposes the bound port only here
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self.port

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ health and metrics

    async def healthz(self, request: web.Request) -> web.Response:
        """Live: this process and its event loop answer (nothing else is checked)."""
        return web.json_response({"status": "ok"})

    async def readyz(self, request: web.Request) -> web.Response:
        """Ready: the gRPC port serves, the store answers and its schema is current."""
        if not self.serving():
            return web.json_response({"ready": False, "detail": "the server is not serving"}, status=503)
        readiness = await self.instances.store.readiness()
        body = {"ready": readiness.ready, "detail": readiness.detail}
        if readiness.expected_version:
            body["schema_version"] = readiness.schema_version
            body["expected_schema_version"] = readiness.expected_version
        return web.json_response(body, status=200 if readiness.ready else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format (the ``metrics`` extra)."""
        if self.metrics_text is None:
            return web.Response(
                status=501, text="metrics need the metrics extra: pip install 'wiggle-workflows[metrics]'\n"
            )
        return web.Response(body=self.metrics_text(), content_type="text/plain", charset="utf-8")

    async def root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/instances")

    # ------------------------------------------------------------------ pages and API

    async def _instances_data(self, request: web.Request) -> dict[str, Any]:
        return await api.instances_page(self.sources, dict(request.query))

    async def _instance_data(self, request: web.Request) -> dict[str, Any]:
        return await api.instance_page(self.sources, request.match_info["id"])

    async def _workflows_data(self, request: web.Request) -> dict[str, Any]:
        return await api.workflows_page(self.sources)

    async def _queues_data(self, request: web.Request) -> dict[str, Any]:
        return await api.queues_page(self.sources)

    async def _cluster_data(self, request: web.Request) -> dict[str, Any]:
        return await api.cluster_page(self.sources)

    async def _schedules_data(self, request: web.Request) -> dict[str, Any]:
        return await schedules.schedules_page(self.instances, request.query.get("workflow", "").strip())

    def page(
        self,
        data: Callable[[web.Request], Awaitable[dict[str, Any]]],
        render: Callable[[dict[str, Any]], str],
        name: str,
    ) -> Handler:
        """A GET handler rendering ``data`` as HTML (only ``<main>``'s content for a refresh)."""

        async def handler(request: web.Request) -> web.StreamResponse:
            body = render(await data(request))
            if request.headers.get("X-Fragment") != "1":
                body = pages.layout(name, name, body)
            return web.Response(text=body, content_type="text/html")

        return handler

    def json(self, data: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
        """A GET handler answering ``data`` as JSON."""

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.json_response(await data(request))

        return handler

    # ------------------------------------------------------------------ actions

    async def _body(self, request: web.Request) -> tuple[dict[str, Any], str]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InvalidArgument("the request body must be a JSON object") from None
        if not isinstance(body, dict):
            raise InvalidArgument("the request body must be a JSON object")
        actor = body.get("actor")
        if not isinstance(actor, str) or not actor.strip():
            raise InvalidArgument('"actor" must name who does this (it is recorded in the history)')
        if len(actor) > MAX_ACTOR_CHARS:
            raise InvalidArgument(f'"actor" is {len(actor)} characters; the limit is {MAX_ACTOR_CHARS}')
        who = actor.strip()
        identity = request.get(IDENTITY)
        if identity is not None and identity != who:  # authenticated: the credential says who it is
            who = f"{who} as {identity}"
        return body, f"{who} (dashboard, {request.remote or 'unknown address'})"

    async def cancel(self, request: web.Request) -> web.Response:
        """Cancel an instance; recorded in its history with who did it."""
        body, actor = await self._body(request)
        reason = body.get("reason") or "cancelled from the dashboard"
        if not isinstance(reason, str):
            raise InvalidArgument('"reason" must be a string')
        instance_id = request.match_info["id"]
        validate_name(instance_id, "instance_id")
        view, changed = await self.instances.cancel(instance_id, reason[:1000], actor)
        return web.json_response({"changed": changed, "status": str(view.instance.status)})

    async def complete_user_task(self, request: web.Request) -> web.Response:
        """Complete a user task with ``data``; recorded in the history with who did it."""
        body, actor = await self._body(request)
        data = body.get("data", {})
        if not isinstance(data, dict):
            raise InvalidArgument('"data" must be a JSON object')
        instance_id = request.match_info["id"]
        validate_name(instance_id, "instance_id")
        view = await self.instances.complete_user_task(instance_id, request.match_info["name"], data, actor)
        return web.json_response({"status": str(view.instance.status)})

    async def signal(self, request: web.Request) -> web.Response:
        """Send a signal with ``data``; recorded in the history with who did it."""
        body, actor = await self._body(request)
        data = body.get("data", {})
        if not isinstance(data, dict):
            raise InvalidArgument('"data" must be a JSON object')
        instance_id, name = request.match_info["id"], request.match_info["name"]
        validate_name(instance_id, "instance_id")
        validate_name(name, "signal name")
        outcome, view = await actions.send_signal(self.instances, instance_id, name, data, actor)
        return web.json_response({"outcome": str(outcome), "status": str(view.instance.status)})

    async def retry(self, request: web.Request) -> web.Response:
        """Retry a FAILED instance from the failed step (or ``from_node``); who did it is recorded."""
        body, actor = await self._body(request)
        from_node = body.get("from_node") or ""
        if not isinstance(from_node, str):
            raise InvalidArgument('"from_node" must be a node id (a string), or empty for the failed step')
        instance_id = request.match_info["id"]
        validate_name(instance_id, "instance_id")
        view = await actions.retry_failed(self.instances, instance_id, from_node, actor)
        return web.json_response({"status": str(view.instance.status)})

    async def schedule_action(self, request: web.Request) -> web.Response:
        """Pause, resume or trigger a schedule (``trigger`` starts one instance now)."""
        _, actor = await self._body(request)  # schedules keep no history: the log names who acted
        schedule_id, action = request.match_info["id"], request.match_info["action"]
        validate_name(schedule_id, "schedule_id")
        log.info("%s: %s schedule %s", actor, action, schedule_id)
        return web.json_response(await schedules.act(self.instances, schedule_id, action))
