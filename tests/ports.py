"""A free loopback port for a test's server to listen on (HTTP, gRPC, a relay).

Binding port 0 and closing the socket hands back a port from the kernel's ephemeral range, the
range every outgoing connection takes its local port from: with the suite on several processes,
a PostgreSQL or gRPC client connection could take that port before the test's server bound it
("address already in use": a CI run of tests/server/test_readiness.py). ``free_port`` picks at
random below that range instead, where nothing is handed out, and checks the port binds; two
tests picking one port at once is then a 1-in-thousands chance, not a race with every connection.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_FLOOR = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default; elsewhere a range this low is rarely ephemeral either


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, outside the ephemeral range."""
    high = max(_ephemeral_low() - 1, _FLOOR + 1000)
    for _ in range(200):
        port = random.randint(_FLOOR, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {_FLOOR} and {high}")
