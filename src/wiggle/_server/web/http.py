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
    POST /api/bulk/cancel|retry?<the list filters> {"actor": "...", "dry_run": true} | {..., "expected": N}
    GET  /schedules  /api/schedules                                         (HTML, JSON)
    POST /api/schedules/{id}/pause|resume|trigger {"actor": "..."}
    GET  /signin   POST /signin {"token": "..."} | {"certificate": true}   POST /signout
    GET  /static/dashboard.css  /static/dashboard.js

A page requested with the header ``X-Fragment: 1`` answers its ``<main>`` content only (the
pages' refresh). Errors answer ``{"error": message, "code": ErrorCode}`` with an HTTP status
(errors.py); who may call what, and the refusal of forged requests, are access.py's; sessions
are sessions.py's. Request bodies pass the gRPC edge's decoder (wiggle/_wire/payload.py: size,
nesting depth, a JSON object).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..._model import validate_name
from ..._security.tokens import Identity
from ..._wire.payload import decode_object
from ...errors import ErrorCode, InvalidArgument, PermissionDenied, WiggleError
from ..caller_text import check_name
from ..http_security import HttpSecurity
from ..instances import Instances
from ..operator import as_identity, log_action
from ..readiness import readiness_answer
from . import actions, api, bulk, pages, schedules
from .access import CALLER, OPEN, Origins, WebAccess
from .assets import ASSETS
from .errors import HTTP_STATUS, HttpProblem, errors, secure_headers
from .sessions import Sessions
from .signin import SignIn

if TYPE_CHECKING:
    from ..config import ServerConfig

__all__ = ["HttpSide", "HTTP_STATUS", "BODY_SLACK"]

MAX_ACTOR_CHARS = 100
#: a request body may exceed the payload limit (max_payload_bytes) by this much: the actor, the
#: reason and the JSON around the payload
BODY_SLACK = 64 * 1024

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpSide:
    """The HTTP port of one server process; ``await start(host, port)``, ``await stop()``."""

    def __init__(
        self,
        instances: Instances,
        sources: api.Sources,
        metrics_text: Callable[[], bytes] | None,
        serving: Callable[[], bool],
        security: HttpSecurity | None = None,
        settings: ServerConfig | None = None,
    ) -> None:
        from ..config import ServerConfig

        settings = settings or ServerConfig()
        self.security = security  # TLS and roles (wiggle/_server/http_security.py); None: open
        self.instances = instances
        self.sources = sources
        self.metrics_text = metrics_text
        self.serving = serving  # False before the gRPC port is up and once the server stops
        self.port = 0
        self._runner: web.AppRunner | None = None
        authenticator = security.authenticator if security is not None else None
        tls = security is not None and security.tls is not None
        self.sessions = (
            Sessions(
                authenticator.table,
                settings.session_idle_seconds,
                settings.session_max_seconds,
                now_ms=instances.clock.now,
            )
            if authenticator is not None
            else None
        )
        self.access = WebAccess(
            security,
            self.sessions,
            Origins(settings.http_origin, settings.host, tls),
            settings.http_trusted_header if authenticator is not None else "",
            settings.http_trusted_proxies,
        )
        self.signin = SignIn(self.access, self.sessions, settings.session_max_seconds)

    def app(self) -> web.Application:
        """The aiohttp application (routes above)."""
        self.body_limit = self.instances.config.max_payload_bytes + BODY_SLACK
        # aiohttp's Middleware type; ours are plain coroutine functions. Errors outermost.
        middlewares: list[Any] = [errors, self.access.middleware()]
        app = web.Application(middlewares=middlewares, client_max_size=self.body_limit)
        app.on_response_prepare.append(secure_headers)
        r = app.router
        r.add_get("/healthz", self.healthz)
        r.add_get("/readyz", self.readyz)
        r.add_get("/metrics", self.metrics)
        r.add_get("/", self.root)
        for path in ASSETS:
            r.add_get(path, self.asset)
        r.add_get("/signin", self.signin.page)
        r.add_post("/signin", self.sign_in)
        r.add_post("/signout", self.signin.sign_out)
        r.add_get("/instances", self.page(self._instances_data, pages.instances_html, "instances"))
        r.add_get("/instances/{id}", self.page(self._instance_data, pages.instance_html, "instances"))
        r.add_get("/workflows", self.page(self._workflows_data, pages.workflows_html, "workflows"))
        r.add_get("/queues", self.page(self._queues_data, pages.queues_html, "queues"))
        r.add_get("/cluster", self.page(self._cluster_data, pages.cluster_html, "cluster"))
        r.add_get("/schedules", self.page(self._schedules_data, schedules.schedules_html, "schedules"))
        r.add_get("/api/instances", self.json(self._instances_data, api.LIST_PARAMS, "list"))
        r.add_get("/api/instances/{id}", self.json(self._instance_data))
        r.add_get("/api/workflows", self.json(self._workflows_data))
        r.add_get("/api/queues", self.json(self._queues_data))
        r.add_get("/api/cluster", self.json(self._cluster_data))
        r.add_get(
            "/api/schedules", self.json(self._schedules_data, frozenset({"workflow"}), "schedules list")
        )
        # each action's route is named after the RPC whose roles it needs (access.py)
        r.add_post("/api/instances/{id}/cancel", self.cancel, name="CancelInstance")
        r.add_post("/api/instances/{id}/user-tasks/{name}", self.complete_user_task, name="CompleteUserTask")
        r.add_post("/api/instances/{id}/signals/{name}", self.signal, name="SignalInstance")
        r.add_post("/api/instances/{id}/retry", self.retry, name="RetryInstance")
        r.add_post("/api/bulk/{action}", self.bulk, name="bulk_action")
        r.add_post("/api/schedules/{id}/{action}", self.schedule_action, name="schedule_action")
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
        status, body = await readiness_answer(self.instances.store, self.serving())  # within 1 s
        return web.json_response(body, status=status)

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
        data = await api.instances_page(self.sources, dict(request.query))
        _only_allowed(data["actions"], request, _BULK_RPCS)
        return data

    async def _instance_data(self, request: web.Request) -> dict[str, Any]:
        data = await api.instance_page(self.sources, request.match_info["id"])
        _only_allowed(data["actions"], request, _ACTION_RPCS)
        return data

    async def _workflows_data(self, request: web.Request) -> dict[str, Any]:
        return await api.workflows_page(self.sources)

    async def _queues_data(self, request: web.Request) -> dict[str, Any]:
        return await api.queues_page(self.sources)

    async def _cluster_data(self, request: web.Request) -> dict[str, Any]:
        return await api.cluster_page(self.sources)

    async def _schedules_data(self, request: web.Request) -> dict[str, Any]:
        data = await schedules.schedules_page(self.instances, request.query.get("workflow", "").strip())
        _only_allowed(data["actions"], request, _SCHEDULE_RPCS)
        return data

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
                caller = request.get(CALLER, OPEN)
                who = caller.identity.name if caller.identity is not None else ""
                body = pages.layout(
                    name, name, body, who if caller.session or caller.csrf else "", caller.csrf
                )
            return web.Response(text=body, content_type="text/html")

        return handler

    async def asset(self, request: web.Request) -> web.Response:
        """The stylesheet or the script (cached: the pages ask for them by version)."""
        text, content_type = ASSETS[request.path]
        response = web.Response(text=text, content_type=content_type, charset="utf-8")
        response.headers["Cache-Control"] = "public, max-age=86400"
        return response

    def json(
        self,
        data: Callable[[web.Request], Awaitable[dict[str, Any]]],
        params: frozenset[str] = frozenset(),
        what: str = "",
    ) -> Handler:
        """A GET handler answering ``data`` as JSON. A query parameter outside ``params`` is
        refused (400, naming it and the closest of ``params``): a script's misspelt filter is
        named, not ignored (``what`` names the answer in the message; default: the path)."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if request.query:
                api.check_params(request.query, params, what or f"GET {request.path}")
            return web.json_response(await data(request))

        return handler

    # ------------------------------------------------------------------ actions

    async def _read(self, request: web.Request) -> dict[str, Any]:
        """The body as a JSON object, through the gRPC edge's decoder (size, nesting, type)."""
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise HttpProblem(
                413,
                ErrorCode.INVALID_ARGUMENT,
                f"the request body is larger than {self.body_limit} bytes, the limit (max_payload_bytes "
                f"{self.body_limit - BODY_SLACK} plus {BODY_SLACK} for the rest of the body)",
            ) from None
        return decode_object(raw, "the request body", None)

    async def _body(self, request: web.Request) -> tuple[dict[str, Any], str]:
        body = await self._read(request)
        actor = body.get("actor")
        if not isinstance(actor, str) or not actor.strip():
            raise InvalidArgument('"actor" must name who does this (it is recorded in the history)')
        check_name(actor, '"actor"', MAX_ACTOR_CHARS)  # one line of printable text, as on gRPC
        who = actor.strip()
        caller = request.get(CALLER, OPEN)
        if caller.identity is not None:  # authenticated: the credential says who it is
            who = as_identity(who, caller.identity.name)
        return body, f"{who} (dashboard, {request.remote or 'unknown address'})"

    async def sign_in(self, request: web.Request) -> web.Response:
        """POST /signin (signin.py), its body through the same decoder."""
        return await self.signin.sign_in(request, await self._read(request))

    async def cancel(self, request: web.Request) -> web.Response:
        """Cancel an instance; recorded in its history with who did it."""
        body, actor = await self._body(request)
        reason = body.get("reason") or actions.CANCEL_REASON
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

    async def bulk(self, request: web.Request) -> web.Response:
        """Cancel or retry every instance the list filters (the query string) match (bulk.py)."""
        api.check_list_params(request.query)
        query = api.instance_query(request.query, self.instances.clock.now())
        action = request.match_info["action"]
        body = await self._read(request)
        if body.get("dry_run") is True:  # a count changes nothing: no name needed yet
            return web.json_response(await bulk.run_bulk(self.instances, query, action, body, ""))
        body, actor = await self._body(request)
        return web.json_response(await bulk.run_bulk(self.instances, query, action, body, actor))

    async def schedule_action(self, request: web.Request) -> web.Response:
        """Pause, resume or trigger a schedule (``trigger`` starts one instance now). Schedules keep
        no history: the log names who acted (schedules.py), or who was refused and why."""
        _, actor = await self._body(request)
        schedule_id, action = request.match_info["id"], request.match_info["action"]
        try:
            validate_name(schedule_id, "schedule_id")
            answer = await schedules.act(self.instances, schedule_id, action, actor)
        except WiggleError as exc:
            log_action(actor, f"{action[:20]} refused", f"schedule {schedule_id[:100]}", str(exc))
            raise
        return web.json_response(answer)


# A page's action -> the RPC whose roles it needs (its row in wiggle/_server/routes.py): the
# Instance page's, the Instances page's bulk actions (each instance acted on as by the single
# action: access.py action_of), the Schedules page's.
_ACTION_RPCS = {
    "cancel": "CancelInstance",
    "complete_user_task": "CompleteUserTask",
    "retry": "RetryInstance",
    "signal": "SignalInstance",
}
_BULK_RPCS = {"bulk_cancel": "CancelInstance", "bulk_retry": "RetryInstance"}
_SCHEDULE_RPCS = {"pause": "PauseSchedule", "resume": "ResumeSchedule", "trigger": "TriggerSchedule"}


def _only_allowed(actions: dict[str, Any], request: web.Request, rpcs: dict[str, str]) -> None:
    """Turn off the actions the caller's roles may not take (a viewer saw every button, each
    answering 403 when clicked): the page offers what the caller can do. Without access control
    (no identity) every action stays on."""
    caller = request.get(CALLER)
    if caller is None or caller.identity is None:
        return
    for action, rpc in rpcs.items():
        if not _may(caller.identity, rpc):
            actions[action] = [] if action == "complete_user_task" else False


def _may(identity: Identity, rpc: str) -> bool:
    """Whether ``identity``'s roles may take the action that stands for ``rpc``."""
    try:
        HttpSecurity.check_action(identity, rpc)
    except PermissionDenied:
        return False
    return True
