"""TLS and access control for the HTTP port, framework-free so any HTTP server can adopt it.

``HttpSecurity.ssl_context()`` is the ``ssl.SSLContext`` to serve with (None: plaintext), kept
current when the certificate files change; ``HttpSecurity.check(path, authorization,
peer_common_name)`` authenticates a request and checks its path against the role table
(``HTTP_ROLES`` in wiggle/_security/roles.py), raising Unauthenticated or PermissionDenied with
the message to send (401 / 403; ``http_status`` maps them). /metrics and /healthz can be left
open (``open_metrics``). The built-in /metrics server (wiggle/_server/metrics_http.py) calls
``check``; the dashboard (wiggle/_server/web/access.py) authenticates itself (tokens, sessions,
an SSO proxy's header, certificates) and calls ``check_read`` and ``check_action``.
"""

from __future__ import annotations

import ssl

from .._security.roles import HTTP_ROLES, check_method
from .._security.tls import ServerTLS
from .._security.tokens import Identity
from ..errors import ErrorCode, WiggleError
from .auth_failures import Throttled
from .guard import Authenticator
from .routes import allowed_roles

__all__ = ["HttpSecurity", "OPEN_PATHS", "http_status", "peer_common_name"]

#: paths ``open_metrics`` leaves open.
OPEN_PATHS = ("/metrics", "/healthz")

_HTTP_STATUS = {ErrorCode.UNAUTHENTICATED: 401, ErrorCode.PERMISSION_DENIED: 403}


def http_status(error: WiggleError) -> int:
    """The HTTP status for an error ``check`` raised (401, 403, 429 for an address that waits
    after too many unknown credentials; 500 for anything else)."""
    if isinstance(error, Throttled):
        return 429
    return _HTTP_STATUS.get(error.code, 500)


def peer_common_name(peercert: object) -> str:
    """The common name of a verified peer certificate (``SSLSocket.getpeercert()``), or ''."""
    if not isinstance(peercert, dict):
        return ""
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class HttpSecurity:
    """What the HTTP port needs from the server's security settings."""

    def __init__(
        self, tls: ServerTLS | None, authenticator: Authenticator | None, open_metrics: bool = False
    ) -> None:
        self.tls = tls
        self.authenticator = authenticator
        self.open_metrics = open_metrics

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to wrap the listening socket with; None when TLS is off."""
        return self.tls.ssl_context() if self.tls is not None else None

    def roles_for(self, path: str) -> str:
        """The HTTP_ROLES prefix governing ``path`` (the longest that matches)."""
        best = "/"
        for prefix in HTTP_ROLES:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/") or prefix == "/":
                if len(prefix) > len(best):
                    best = prefix
        return best

    def is_open(self, path: str) -> bool:
        """Whether ``path`` needs no credential (access control off, or left open)."""
        return self.authenticator is None or (self.open_metrics and path.split("?", 1)[0] in OPEN_PATHS)

    def check(self, path: str, authorization: str, peer_cn: str, address: str = "") -> Identity | None:
        """The caller of ``path``; None when access control is off or the path is left open. An
        unknown credential counts against ``address`` (the caller's), as on the gRPC port."""
        path = path.split("?", 1)[0]
        if self.authenticator is None or self.is_open(path):
            return None
        identity = self.authenticator.authenticate(authorization, peer_cn, lambda: address, "HTTP")
        self.check_read(identity, path)
        return identity

    def check_read(self, identity: Identity, path: str) -> None:
        """PermissionDenied unless ``identity`` may read ``path`` (HTTP_ROLES)."""
        check_method(identity, path.split("?", 1)[0], HTTP_ROLES[self.roles_for(path)])

    @staticmethod
    def check_action(identity: Identity, rpc: str) -> None:
        """PermissionDenied unless ``identity`` may do what the RPC ``rpc`` does: an action on
        the HTTP port needs exactly the roles of its gRPC twin (its row in wiggle/_server/routes.py)."""
        check_method(identity, rpc, allowed_roles(rpc))
