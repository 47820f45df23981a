"""Who may call what: the role sets the RPC routes name, the checks, and the HTTP paths' roles.

Each RPC's roles are a column of the routes table (``ROUTES`` in wiggle/_server/routes.py, one
row per RPC of both gRPC services), so an RPC's roles are written once, next to its handler;
a method with no row is admin-only. This module holds only what the rows are made of (the role
sets below, ``admin`` in each), the check, and ``PUBLIC_METHODS`` (health checks, no credential)
— nothing here imports the server. The rules are in docs/semantics.md#security.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import PermissionDenied
from .tokens import Identity, Role

__all__ = [
    "ADMIN_ONLY",
    "CLIENTS",
    "READERS",
    "WORKERS",
    "PUBLIC_METHODS",
    "HTTP_ROLES",
    "check_method",
    "owner_prefix",
]

#: The role sets a route names: who may call it. ``admin`` may call everything, so each holds it.
ADMIN_ONLY: frozenset[Role] = frozenset({Role.ADMIN})
CLIENTS = ADMIN_ONLY | {Role.CLIENT}
READERS = CLIENTS | {Role.VIEWER}
WORKERS = ADMIN_ONLY | {Role.WORKER}

#: full gRPC method paths callable without a credential.
PUBLIC_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})

#: HTTP path prefix -> roles allowed besides admin (the dashboard and API adopt these).
HTTP_ROLES: dict[str, frozenset[Role]] = {
    "/metrics": frozenset({Role.VIEWER}),
    "/healthz": frozenset({Role.VIEWER, Role.CLIENT, Role.WORKER}),
    "/": frozenset({Role.CLIENT, Role.VIEWER}),
}


def check_method(identity: Identity, method: str, roles: Iterable[Role]) -> None:
    """PermissionDenied unless ``identity`` has one of ``roles`` (or admin) to call ``method``
    (an RPC by name or full path, or an HTTP path)."""
    allowed = frozenset(roles) | ADMIN_ONLY
    if identity.roles & allowed:
        return
    need = ", ".join(sorted(r.value for r in allowed))
    have = ", ".join(sorted(r.value for r in identity.roles))
    what = method.rsplit("/", 1)[-1] if "." in method else method  # an RPC by name, an HTTP path whole
    raise PermissionDenied(f"{identity.name!r} (roles: {have}) may not call {what}; it needs one of: {need}")


def owner_prefix(identity: Identity) -> str:
    """What the server puts before a worker's own id: its credential's name (the worker's identity
    on the server comes from its credential, never from what it says)."""
    return identity.name + "/"
