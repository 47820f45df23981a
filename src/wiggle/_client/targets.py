"""One gRPC target for several servers, so a channel moves to another when its own is down.

gRPC's default load-balancing policy (pick_first) connects to the first address that answers and,
when that connection breaks, tries the others in order: handing it every server's address is
the whole fail-over (docs/semantics.md#fail-over). A DNS name that resolves to several addresses
gets the same behaviour from gRPC's resolver unchanged.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

__all__ = ["join_targets"]


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


def join_targets(targets: str | Sequence[str]) -> str:
    """A gRPC target for ``targets``: one host:port as it is, several (a list or a comma-separated
    string) as one ``ipv4:`` / ``ipv6:`` address list, names resolved now, in the order given."""
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
