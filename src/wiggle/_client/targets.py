"""One gRPC target for several servers, so a client's calls spread over them and move on from
one that is down or cut from its database.

Several servers given (a list, or "a:7233,b:7233") become one ``ipv4:`` / ``ipv6:`` address list
served by gRPC's round_robin policy (``balancing``): the channel keeps a connection to each
server that answers and sends each call, and each new stream, to the next of them. A server that
is down is left out until it answers again; one that answers UNAVAILABLE because its database is
away says nothing was applied (``Unavailable.not_applied``), and the call made again goes to the
next server (docs/failover.md#a-server-without-its-database). With gRPC's default policy
(pick_first) every call went to the first server that answered, however many were listed: a
server alive but cut from its database kept its clients and workers, and the others idled.
A single target (a DNS name too) keeps gRPC's default, and so does a list given with
``balance="pick_first"``, where the order is a preference (a group of clients kept on a server of
its own: docs/deployment.md#starts-apart-from-steps), at the cost of staying with a server cut
from its database.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["join_targets", "check_target_type", "check_targets", "balancing", "check_balance", "BALANCES"]

#: The port a wiggle server listens on unless told otherwise (``wiggle server --port``).
DEFAULT_PORT = 7233

#: gRPC's own target forms (its name resolvers), taken as they are: ``dns:///name:port`` (a DNS
#: name resolving to several servers), ``unix:/path``, the ``ipv4:`` / ``ipv6:`` lists
#: ``join_targets`` makes.
_GRPC_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _split(target: str) -> tuple[str, str]:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"server address {target!r} is not host:port")
    return host.strip("[]"), port


def _addresses(host: str, port: str) -> list[tuple[int, str]]:
    try:
        ip = ipaddress.ip_address(host)
        return [(ip.version, str(ip))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ValueError(f"cannot resolve server {host!r}: {exc}") from None
    seen: list[tuple[int, str]] = []
    for family, _, _, _, sockaddr in infos:
        entry = (6 if family == socket.AF_INET6 else 4, str(sockaddr[0]))
        if entry not in seen:
            seen.append(entry)
    return seen


def check_target_type(targets: object) -> None:
    """TypeError unless ``targets`` is a str or a list of them: ``Client(7233)`` met "'int' object
    is not iterable", and a Worker given one found out at its start (wiggle/_worker/worker.py)."""
    if not isinstance(targets, str) and (
        not isinstance(targets, Sequence) or not all(isinstance(t, str) for t in targets)
    ):
        raise TypeError(f"the server address must be 'host:port' (a str), or a list of them, got {targets!r}")


def check_target(target: str) -> None:
    """ValueError saying what to write unless ``target`` (one server) is ``host:port`` or one of
    gRPC's own forms (``_GRPC_SCHEMES``). A URL (``http://127.0.0.1:7233``) waited 3 s and said
    "Unavailable errors resolving http://..."; a host without a port silently dialled port 443."""
    if target.startswith(_GRPC_SCHEMES):
        return
    url = _URL.match(target)
    if url:
        try:
            parts = urlsplit(target)
            named, given = parts.hostname or "host", parts.port
        except ValueError:
            named, given = "host", None
        shown = f"[{named}]" if ":" in named else named
        raise ValueError(
            f"server address {target!r} is a URL ({url.group(1)}://): a target is host:port, "
            f"e.g. '{shown}:{given or DEFAULT_PORT}'"
            + ("" if given else f" (a wiggle server listens on {DEFAULT_PORT} unless told otherwise)")
        )
    host, sep, port = target.rpartition(":")
    if target.startswith("[") and target.endswith("]") or not sep:  # "[::1]", "localhost"
        raise ValueError(
            f"server address {target!r} has no port: add it, e.g. '{target}:{DEFAULT_PORT}' (a wiggle "
            f"server listens on {DEFAULT_PORT} unless told otherwise); without one gRPC dials port 443"
        )
    if host and port.isdigit() and not 0 < int(port) < 65536:  # gRPC would wrap 112746 to 47210
        raise ValueError(f"server address {target!r}: port {int(port)} is not between 1 and 65535")
    if not host or not port.isdigit():
        raise ValueError(f"server address {target!r} is not host:port (e.g. 'localhost:{DEFAULT_PORT}')")


def check_targets(targets: object) -> None:
    """``check_target_type``, then ``check_target`` for each server named: what a client, a
    worker (at once, though its names are resolved at its start) and ``--target`` share."""
    check_target_type(targets)
    assert isinstance(targets, (str, Sequence))
    items = targets.split(",") if isinstance(targets, str) else list(targets)
    for item in items:
        if item.strip():
            check_target(item.strip())


def join_targets(targets: str | Sequence[str]) -> str:
    """A gRPC target for ``targets``: one host:port as it is, several (a list or a comma-separated
    string) as one ``ipv4:`` / ``ipv6:`` address list, names resolved now, in the order given.
    TypeError for anything else (``check_target_type``), ValueError for a URL, a server without a
    port (``check_target``)."""
    check_targets(targets)
    items = (
        [t.strip() for t in targets.split(",")] if isinstance(targets, str) else [t.strip() for t in targets]
    )
    items = [t for t in items if t]
    if not items:
        raise ValueError("no server address given")
    if len(items) == 1:
        return items[0]
    resolved: list[tuple[int, str]] = []
    for item in items:
        host, port = _split(item)
        for version, ip in _addresses(host, port):
            resolved.append((version, f"[{ip}]:{port}" if version == 6 else f"{ip}:{port}"))
    versions = {v for v, _ in resolved}
    if len(versions) > 1:
        raise ValueError(f"servers {items} mix IPv4 and IPv6 addresses; list one family")
    scheme = "ipv6" if versions == {6} else "ipv4"
    return f"{scheme}:" + ",".join(addr for _, addr in resolved)


#: How a client or worker spreads its calls over several servers (``balancing``).
BALANCES = ("round_robin", "pick_first")

#: The service config of a channel over several servers (``balancing``).
_ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


def check_balance(balance: str) -> str:
    """``balance`` if it is one of BALANCES, else ValueError naming them."""
    if balance not in BALANCES:
        raise ValueError(f"balance must be 'round_robin' or 'pick_first', got {balance!r}")
    return balance


def balancing(target: str, balance: str = "round_robin") -> list[tuple[str, str]]:
    """The channel options of ``target`` (``join_targets``' result): round_robin over an address
    list of several servers, unless ``balance`` is "pick_first" (every call to the first server
    that answers, the next only while it is down: the order given is a preference, as for
    docs/deployment.md#starts-apart-from-steps); nothing for a single server."""
    if check_balance(balance) == "round_robin" and target.startswith(("ipv4:", "ipv6:")) and "," in target:
        return [("grpc.service_config", _ROUND_ROBIN)]
    return []
