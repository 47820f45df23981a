"""Who may call what: the one per-RPC role table, and the per-request checks of worker calls.

``RPC_ROLES`` maps each method of wiggle.v1.WiggleControlPlane to the roles allowed besides
``admin`` (who may call everything). A method missing from the table is admin-only, so a new
RPC is closed until it is added here. ``PUBLIC_METHODS`` need no credential (health checks).
The rules are in docs/semantics.md#security.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import PermissionDenied
from .tokens import Identity, Role

__all__ = [
    "RPC_ROLES",
    "UPSTREAM_RPC_ROLES",
    "PUBLIC_METHODS",
    "HTTP_ROLES",
    "WORKER_METHODS",
    "allowed_roles",
    "check_method",
    "owner_prefix",
]

_READ = frozenset({Role.CLIENT, Role.VIEWER})
_CLIENT = frozenset({Role.CLIENT})
_WORKER = frozenset({Role.WORKER})
_ADMIN: frozenset[Role] = frozenset()

#: method -> roles allowed besides admin. Missing: admin only.
RPC_ROLES: dict[str, frozenset[Role]] = {
    # definitions
    "RegisterWorkflow": _ADMIN,
    "GetWorkflow": _READ | _WORKER,
    "ListWorkflows": _READ,
    # instances
    "StartInstance": _CLIENT,
    "StartInstances": _CLIENT,
    "GetInstance": _READ,
    "ListInstances": _READ,
    "GetHistory": _READ,
    "ListQueues": _READ,
    "CompleteUserTask": _CLIENT,
    "SignalInstance": _CLIENT,
    "CancelInstance": _ADMIN,
    "RetryInstance": _ADMIN,
    # schedules: reads for client and viewer, every change admin only
    "ListSchedules": _READ,
    "GetSchedule": _READ,
    "CreateSchedule": _ADMIN,
    "UpdateSchedule": _ADMIN,
    "PauseSchedule": _ADMIN,
    "ResumeSchedule": _ADMIN,
    "DeleteSchedule": _ADMIN,
    "TriggerSchedule": _ADMIN,
    # workers
    "PollTasks": _WORKER,
    "CompleteTask": _WORKER,
    "FailTask": _WORKER,
    "HeartbeatTask": _WORKER,
    "AdvanceRun": _WORKER,
    "WorkerSession": _WORKER,
}

#: methods of upstream Wiggle's service (wiggle/_upstream/service.py) -> roles besides admin: the
#: same as ours for the methods both have, and the cluster views for readers and workers.
UPSTREAM_RPC_ROLES: dict[str, frozenset[Role]] = {
    "HealthCheck": _READ | _WORKER,
    "GetCluster": _READ,
    "ListWorkflows": _READ,
    **{
        name: RPC_ROLES[name]
        for name in (
            "RegisterWorkflow",
            "GetWorkflow",
            "StartInstance",
            "ListInstances",
            "GetInstance",
            "CancelInstance",
            "SignalInstance",
            "CreateSchedule",
            "ListSchedules",
            "DeleteSchedule",
            "PollTasks",
            "CompleteTask",
            "FailTask",
            "HeartbeatTask",
            "AdvanceRun",
        )
    },
}
UPSTREAM_PREFIX = "/dev.wiggle.proto.WiggleControlPlane/"

#: the methods a worker credential is scoped on (its queues, its own leases).
WORKER_METHODS = frozenset({"PollTasks", "CompleteTask", "FailTask", "HeartbeatTask", "AdvanceRun"})

#: full gRPC method paths callable without a credential.
PUBLIC_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})

#: HTTP path prefix -> roles allowed besides admin (the dashboard and API adopt these).
HTTP_ROLES: dict[str, frozenset[Role]] = {
    "/metrics": frozenset({Role.VIEWER}),
    "/healthz": frozenset({Role.VIEWER, Role.CLIENT, Role.WORKER}),
    "/": _READ,
}


def allowed_roles(method: str) -> frozenset[Role]:
    """The roles that may call ``method`` (a bare name or a full /package.Service/Method path)."""
    name = method.rsplit("/", 1)[-1]
    if method.startswith(UPSTREAM_PREFIX):
        return UPSTREAM_RPC_ROLES.get(name, _ADMIN) | {Role.ADMIN}
    if method.startswith("/") and not method.startswith("/wiggle.v1.WiggleControlPlane/"):
        return frozenset({Role.ADMIN})  # another service: admin only unless public
    return RPC_ROLES.get(name, _ADMIN) | {Role.ADMIN}


def check_method(identity: Identity, method: str, roles: Iterable[Role] | None = None) -> None:
    """PermissionDenied unless ``identity`` has a role that may call ``method``."""
    allowed = (frozenset(roles) | {Role.ADMIN}) if roles is not None else allowed_roles(method)
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
