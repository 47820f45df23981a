"""Signing in to the dashboard from a browser, and out (docs/dashboard.md#signing-in).

``GET /signin`` shows a form for a token (and, when the browser presented a client certificate
the server knows, a button to sign in with it). ``POST /signin`` with ``{"token": "..."}`` or
``{"certificate": true}`` (and ``next``: where to go after) checks the credential exactly as the
gRPC port does (an unknown one counts against the address: throttle.py), refuses one whose
roles can read nothing here (a worker's: 403), opens a server-side session
(wiggle/_server/web/sessions.py) and sets its cookie: an opaque random id, ``HttpOnly``,
``Secure`` under TLS, ``SameSite=Strict``, ``Path=/``.
``POST /signout`` ends the session of the cookie and deletes it.
"""

from __future__ import annotations

import hmac
from html import escape
from typing import Any

from aiohttp import web

from ..._security.roles import ADMIN_ONLY, HTTP_ROLES
from ..._security.tokens import hash_token
from ...errors import FailedPrecondition, InvalidArgument, PermissionDenied, Unauthenticated
from ..http_security import peer_common_name
from .access import CSRF_HEADER, WebAccess
from .pages import layout
from .sessions import CERTIFICATE, ENDED_KEPT_SECONDS, TOKEN, Sessions
from .throttle import authenticate

__all__ = ["SignIn", "safe_next"]

MAX_TOKEN_CHARS = 1000
#: the roles that can read the dashboard's pages: a credential with none of them cannot sign in
DASHBOARD_ROLES = HTTP_ROLES["/"] | ADMIN_ONLY
#: where a sign-in's failures are said to come from, in the log
SIGN_IN = "dashboard sign-in"


def safe_next(value: object) -> str:
    """Where to go after signing in: a path on this dashboard, never another site."""
    if not isinstance(value, str) or not value.startswith("/") or "\\" in value:
        return "/instances"
    if any(c.isspace() or not c.isprintable() for c in value):  # browsers drop tabs: "/\t/x" is "//x"
        return "/instances"
    if value.startswith("//"):
        return "/instances"
    if value.startswith(("/signin", "/signout")):
        return "/instances"
    return value[:2000]


class SignIn:
    """The sign-in page and its two actions, over one port's access middleware and sessions."""

    def __init__(self, access: WebAccess, sessions: Sessions | None, max_age: float) -> None:
        self.access = access
        self.sessions = sessions
        self.max_age = max_age

    def _certificate(self, request: web.Request) -> str:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        return peer_common_name(peer)

    async def page(self, request: web.Request) -> web.Response:
        """The sign-in form (or why there is nothing to sign in to)."""
        authenticator = self.access.authenticator
        if authenticator is None:
            body = (
                '<h2>Sign in</h2><p id="no-signin">This server has no identity file and no client '
                'certificates: the dashboard is open to whoever reaches it. <a href="/instances">Go on</a>.</p>'
            )
            return web.Response(text=layout("sign in", "signin", body), content_type="text/html")
        next_path = escape(safe_next(request.query.get("next", "")))
        cn = self._certificate(request)
        certificate = ""
        if cn:
            certificate = (
                f'<p>or <button type="submit" id="signin-certificate">sign in with the certificate '
                f"<b>{escape(cn)}</b></button></p>"
            )
        token = ""
        if authenticator.table is not None:
            token = (
                '<label>Token (as made by <code>wiggle token</code>) <input id="token" type="password" '
                'autocomplete="current-password" required></label><button type="submit" id="signin-token">sign in</button>'
            )
        # #signed-out: the script says there why the session ended, when a page was sent here by
        # its refresh or an action answered 401 (assets.py toSignIn)
        body = (
            '<h2>Sign in</h2><p id="signed-out" class="err hidden" role="status"></p>'
            f'<form id="signin" class="signin" data-next="{next_path}">{token}{certificate}'
            '<p class="err"></p></form><p class="muted">Your session ends when you sign out, after a while '
            "unused (a page left open, refreshing itself, is not use), and when your identity changes on "
            "the server.</p>"
        )
        return web.Response(text=layout("sign in", "signin", body), content_type="text/html")

    async def sign_in(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        """Check the credential, open a session, set its cookie; ``{"identity", "roles", "next"}``."""
        authenticator = self.access.authenticator
        if authenticator is None or self.sessions is None:
            raise FailedPrecondition(
                "this server has no identity file or client certificates: nothing to sign in to"
            )
        token, certificate = body.get("token"), body.get("certificate")
        # an unknown credential is counted against the address, and an address past the limit is
        # answered 429 whatever it sends (throttle.py); both are logged, rate-limited
        if token not in (None, ""):
            if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
                raise InvalidArgument(f'"token" must be a string of at most {MAX_TOKEN_CHARS} characters')
            identity = authenticate(authenticator, request, f"Bearer {token.strip()}", "", SIGN_IN)
            kind, key = TOKEN, hash_token(token)
        elif certificate is True:
            cn = self._certificate(request)
            if not cn:
                raise Unauthenticated("this browser presented no client certificate; sign in with a token")
            identity = authenticate(authenticator, request, "", cn, SIGN_IN)
            kind, key = CERTIFICATE, cn
        else:
            raise InvalidArgument('sign in with {"token": "<token>"} or {"certificate": true}')
        if not identity.roles & DASHBOARD_ROLES:
            # a worker's credential reads nothing here: a session of it would only take room
            # from those who can (sessions.py keeps at most MAX_SESSIONS)
            have = ", ".join(sorted(r.value for r in identity.roles))
            need = ", ".join(sorted(r.value for r in DASHBOARD_ROLES))
            raise PermissionDenied(
                f"{identity.name!r} (roles: {have}) can read nothing on the dashboard, so it cannot sign "
                f"in; sign in with a credential of one of the roles {need} (wiggle token NAME --role viewer)"
            )
        old = request.cookies.get(self.access.cookie)
        if old:  # a new sign-in never keeps the old id (no session fixation)
            self.sessions.close(old)
        session = self.sessions.open(identity, kind, key)
        answer = {
            "identity": identity.name,
            "roles": sorted(r.value for r in identity.roles),
            "next": safe_next(body.get("next")),
            "expires_at": session.expires_at_ms,
        }
        response = web.json_response(answer)
        response.set_cookie(
            self.access.cookie,
            session.id,
            path="/",
            # past the session's own end, so that the server sees the cookie and says why it ended
            # (a browser that dropped it at session_max_seconds was sent to sign in with no reason)
            max_age=int(self.max_age) + ENDED_KEPT_SECONDS,
            secure=self.access.secure_cookie,
            httponly=True,
            samesite="Strict",
        )
        return response

    async def sign_out(self, request: web.Request) -> web.Response:
        """End the cookie's session (its anti-forgery token required) and delete the cookie."""
        session_id = request.cookies.get(self.access.cookie, "")
        ended = False
        if session_id and self.sessions is not None:
            session, _ = self.sessions.get(session_id)
            if session is not None:
                sent = request.headers.get(CSRF_HEADER, "")
                if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                    raise PermissionDenied(f"sign-out needs the page's anti-forgery token ({CSRF_HEADER})")
                ended = self.sessions.close(session_id) is not None
        response = web.json_response({"signed_out": ended})
        response.del_cookie(self.access.cookie, path="/", secure=self.access.secure_cookie, samesite="Strict")
        return response
