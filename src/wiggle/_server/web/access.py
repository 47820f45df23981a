"""Who is calling the HTTP port, what they may do, and refusing forged requests.

Every request: its ``Host`` must be a name this dashboard answers to (loopback addresses, this
machine's names, the bind address, ``http_origin``'s host: a DNS-rebinding page is refused).

Every state-changing request (any method but GET, HEAD, OPTIONS), with or without an identity
file: a browser's ``Sec-Fetch-Site`` must be same-origin, its ``Origin`` (or, without one, its
``Referer``) must be this dashboard's origin, and the body must be ``application/json`` (which a
page elsewhere cannot send without a CORS preflight this port never grants). Requests of a browser
session (cookie) or of an SSO proxy's header must also carry the page's anti-forgery token in
``X-Wiggle-CSRF``. A script with a bearer token or a client certificate sends no Origin and no
token: it is refused only if it says it comes from elsewhere.

With access control on, the caller is, in this order: the bearer token of an ``Authorization``
header; the identity an SSO proxy names in ``http_trusted_header`` (from ``http_trusted_proxies``
only); the browser session of the cookie (wiggle/_server/web/sessions.py); the verified client
certificate. An unknown token or certificate counts against the caller's address (throttle.py:
429 past the limit). Reading needs a role the path allows (HTTP_ROLES), an action exactly the
roles of the RPC it stands for (the route's name; its row in wiggle/_server/routes.py).
docs/dashboard.md#signing-in has the rules.

A request carrying ``X-Wiggle-Refresh: 1`` is a page's background refresh, not a person: it does
not count as use of its session (sessions.py), so an open tab still reaches the idle timeout.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NamedTuple
from urllib.parse import urlencode, urlsplit

from aiohttp import web

from ..._security.tokens import Identity
from ...errors import ErrorCode, Unauthenticated
from ..caller_text import loggable
from ..http_security import HttpSecurity, peer_common_name
from .bulk import BULK_ACTIONS
from .errors import HttpProblem, wants_html
from .schedules import ACTIONS as SCHEDULE_ACTIONS
from .sessions import Session, Sessions
from .throttle import authenticate

__all__ = [
    "Caller",
    "CALLER",
    "WebAccess",
    "Origins",
    "CSRF_HEADER",
    "REFRESH_HEADER",
    "SAFE_METHODS",
    "PUBLIC_PATHS",
]

log = logging.getLogger("wiggle.http")

CSRF_HEADER = "X-Wiggle-CSRF"
#: set (to "1") by the pages' background refresh (assets.py): the session is read, not used
REFRESH_HEADER = "X-Wiggle-Refresh"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: paths anyone may reach (signing in; the files the pages load); /signout checks its own session
PUBLIC_PATHS = ("/signin", "/signout", "/static/")
#: probes answer whatever Host a load balancer or Kubernetes sends
PROBES = ("/healthz", "/readyz", "/metrics")


class Caller(NamedTuple):
    """The authenticated caller of one request."""

    identity: Identity | None  # None: access control is off, or a public path
    how: str  # open, token, proxy, session, certificate
    session: Session | None = None
    csrf: str = ""  # the anti-forgery token its state-changing requests must carry ('' none)


OPEN = Caller(None, "open")
#: the caller of a request (set by the access middleware)
CALLER = web.RequestKey("caller", Caller)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _origin(url: str) -> str:
    """scheme://host[:port], lower case, without the scheme's default port ('' if not a URL)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    try:
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    default = 443 if parts.scheme == "https" else 80
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


class Origins:
    """The origin this dashboard is served at, and the host names it answers to."""

    def __init__(self, public: str, bind_host: str, tls: bool) -> None:
        self.public = _origin(public) if public else ""
        self.scheme = "https" if tls else "http"
        names = {"localhost", bind_host.lower().strip("[]"), socket.gethostname().lower()}
        names.add(socket.getfqdn().lower())
        if public:
            names.add((urlsplit(public).hostname or "").lower())
        self.names = {n for n in names if n}

    def host_ok(self, host: str) -> bool:
        """Whether the Host header names this dashboard (an address, or one of its names)."""
        name = (urlsplit(f"//{host}").hostname or "").lower()
        if name in self.names or name.endswith(".localhost"):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def served(self, request: web.Request) -> str:
        """The origin a browser on this dashboard's pages sends (``http_origin``, else its Host)."""
        return self.public or _origin(f"{self.scheme}://{request.host}")


def _refuse(request: web.Request, status: int, code: ErrorCode, why: str) -> HttpProblem:
    # the path is decoded (%0A is a newline) and ``why`` may quote headers: escaped, as caller text
    log.warning(
        "refused %s %s from %s: %s",
        request.method,
        loggable(request.path, 200),
        request.remote,
        loggable(why),
    )
    return HttpProblem(status, code, why)


class WebAccess:
    """The access middleware of one HTTP port (``middleware()``)."""

    def __init__(
        self,
        security: HttpSecurity | None,
        sessions: Sessions | None,
        origins: Origins,
        trusted_header: str = "",
        trusted_proxies: str = "",
    ) -> None:
        self.security = security
        self.sessions = sessions
        self.origins = origins
        self.trusted_header = trusted_header
        self.proxies = [
            ipaddress.ip_network(p.strip(), strict=False) for p in trusted_proxies.split(",") if p.strip()
        ]
        tls = security is not None and security.tls is not None
        self.secure_cookie = tls
        # a __Host- cookie is only ever sent to this host, over TLS, for every path
        self.cookie = "__Host-wiggle-session" if tls else "wiggle-session"

    @property
    def authenticator(self) -> Any:
        return self.security.authenticator if self.security is not None else None

    def middleware(self) -> Callable[[web.Request, Handler], Coroutine[Any, Any, web.StreamResponse]]:
        @web.middleware
        async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
            path = request.path
            if not path.startswith(PROBES) and not self.origins.host_ok(request.host):
                raise _refuse(
                    request,
                    400,
                    ErrorCode.INVALID_ARGUMENT,
                    f"Host {request.host[:100]!r} is not a name this dashboard answers to; "
                    "reach it by its address, or set http_origin (WIGGLE_HTTP_ORIGIN) to its public origin",
                )
            changes = request.method not in SAFE_METHODS
            vouched = self.check_forgery(request) if changes else False
            rpc = self.action_of(request) if changes else ""  # an unknown action: 400, for anyone
            if path.startswith(PUBLIC_PATHS) or self.security is None or self.security.is_open(path):
                request[CALLER] = OPEN
                return await handler(request)
            try:
                caller = self.identify(request)
            except Unauthenticated:
                if wants_html(request):  # a browser: to the sign-in page, and back here after it
                    raise web.HTTPSeeOther("/signin?" + urlencode({"next": request.path_qs})) from None
                raise
            assert caller.identity is not None
            if changes:
                self.check_token(request, caller, vouched)
                if rpc:
                    self.security.check_action(caller.identity, rpc)
            else:
                self.security.check_read(caller.identity, path)
            request[CALLER] = caller
            return await handler(request)

        return access

    def check_forgery(self, request: web.Request) -> bool:
        """Refuse a state-changing request another site's page could have sent (403), or that is
        not JSON (415); True when a browser vouched for where it came from (Origin or Referer)."""
        site = request.headers.get("Sec-Fetch-Site")
        served = self.origins.served(request)
        if site is not None and site not in ("same-origin", "none"):
            why = f"a {site} request may not change anything here; act from this dashboard's own pages ({served})"
            raise _refuse(request, 403, ErrorCode.PERMISSION_DENIED, why)
        vouched = False
        for header in ("Origin", "Referer"):
            value = request.headers.get(header)
            if value is None:
                continue
            if _origin(value) != served:
                why = f"{header} {value[:100]!r} is not this dashboard's origin {served}; actions come from its own pages"
                raise _refuse(request, 403, ErrorCode.PERMISSION_DENIED, why)
            vouched = True
            break  # Origin when there is one, else Referer
        if request.content_type != "application/json":
            given = request.headers.get("Content-Type", "none")[:100]
            why = f"{request.method} {request.path[:200]} takes Content-Type: application/json, got {given!r}"
            raise _refuse(request, 415, ErrorCode.INVALID_ARGUMENT, why)
        return vouched

    def check_token(self, request: web.Request, caller: Caller, vouched: bool) -> None:
        """A browser-held credential (a session, the proxy's header) needs the page's Origin and
        its anti-forgery token as well: both are what a forged request lacks."""
        if not caller.csrf:
            return
        if not vouched:
            why = (
                "a signed-in browser's request must say where it comes from (Origin); act from the dashboard"
            )
            raise _refuse(request, 403, ErrorCode.PERMISSION_DENIED, why)
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), caller.csrf.encode()):
            why = f"the anti-forgery token ({CSRF_HEADER}) is missing or wrong; reload the page and try again"
            raise _refuse(request, 403, ErrorCode.PERMISSION_DENIED, why)

    @staticmethod
    def action_of(request: web.Request) -> str:
        """The RPC a POST route stands for ('' for a path that is not an action: 404 / 405 follow).
        A schedule or bulk action that is none of its page's is 400 naming those, before any role
        is checked: its made-up RPC was refused naming RPCs that do not exist ("may not call
        GetSchedule"), or passed for a read and was logged as an operator's refused action."""
        route = request.match_info.route
        name = route.name if route is not None else None
        for route_name, what, actions, rpc in (
            ("schedule_action", "schedule action", SCHEDULE_ACTIONS, "Schedule"),
            ("bulk_action", "bulk action", BULK_ACTIONS, "Instance"),  # each as by CancelInstance, ...
        ):
            if name == route_name:
                action = request.match_info.get("action", "")
                if action not in actions:
                    why = f"{what} must be one of {', '.join(actions)}, got {action[:40]!r}"
                    raise _refuse(request, 400, ErrorCode.INVALID_ARGUMENT, why)
                return f"{action.title()}{rpc}"
        return name or ""

    def proxy_ok(self, peer: str | None) -> bool:
        """Whether ``peer`` is one of the SSO proxies."""
        try:
            address = ipaddress.ip_address(peer or "")
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    def identify(self, request: web.Request) -> Caller:
        """The caller (see the module's docstring for the order); Unauthenticated naming what is wrong."""
        authenticator = self.authenticator
        authorization = request.headers.get("Authorization", "")
        if authorization:  # an unknown token counts against the address, as a sign-in's does
            return Caller(authenticate(authenticator, request, authorization, "", "HTTP API"), "token")
        if self.trusted_header and self.trusted_header in request.headers:
            return self._proxied(request)
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        common_name = peer_common_name(peer)
        session_id = request.cookies.get(self.cookie, "")
        if session_id and self.sessions is not None:
            background = request.headers.get(REFRESH_HEADER) == "1"
            session, why = self.sessions.get(session_id, touch=not background)
            if session is not None:
                if self.sessions.current(session) == session.identity:
                    return Caller(session.identity, "session", session, session.csrf)
                self.sessions.close(session_id)
                why = "the session's identity was removed or changed"
            if not common_name:
                raise Unauthenticated(f"{why}; sign in again at /signin")
        return Caller(authenticate(authenticator, request, "", common_name, "HTTP API"), "certificate")

    def _proxied(self, request: web.Request) -> Caller:
        header = self.trusted_header
        if not self.proxy_ok(request.remote):
            raise Unauthenticated(
                f"the {header} header is only taken from the SSO proxies (http_trusted_proxies); "
                f"{request.remote} is not one"
            )
        name = request.headers[header].strip()
        table = self.authenticator.table
        identity = table.by_name(name) if table is not None else None
        if identity is None:
            raise Unauthenticated(f"the SSO proxy signed in {name[:100]!r}, who is not in the identity file")
        assert self.sessions is not None
        return Caller(identity, "proxy", None, self.sessions.proxy_csrf(name))
