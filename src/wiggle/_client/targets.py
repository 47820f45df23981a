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
import socket
from collections.abc import Sequence

__all__ = ["join_targets", "check_target_type", "balancing", "check_balance", "BALANCES"]


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


def join_targets(targets: str | Sequence[str]) -> str:
    """A gRPC target for ``targets``: one host:port as it is, several (a list or a comma-separated
    string) as one ``ipv4:`` / ``ipv6:`` address list, names resolved now, in the order given.
    TypeError for anything else (``check_target_type``)."""
    check_target_type(targets)
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
