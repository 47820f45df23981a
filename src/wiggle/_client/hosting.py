"""Whether a blocking call would stop the very event loop that has to answer it.

The blocking ``Client`` waits for its answer on the calling thread. Called on the thread of a
running event loop (async code, a Jupyter cell), it holds that loop still until the answer comes:
harmless when its server runs elsewhere (another process, another thread's loop, as
``SyncWorkflowEnvironment``'s does), a hang when the server is one of this process running on that
same loop, an ``EmbeddedServer`` or a ``WorkflowEnvironment`` started in it (wiggle/testing.py,
wiggle/_testing/environment.py): the server's handlers cannot run while the loop waits, and the
call ended 30 s later with "got no answer", saying nothing of the loop. ``refuse_on_servers_loop``
says so at once instead.

Each server of this process says which loop it runs on (``hosted``, called by
wiggle/_server/app.py when it starts and stops), so the check is a dictionary look-up: with no loop
running on the thread (the blocking client's ordinary calls) it costs nothing at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from typing import NamedTuple

from .._urls import host_address

__all__ = ["refuse_on_servers_loop", "server_on_this_loop", "hosted", "Hosted"]


def refuse_on_servers_loop(target: str) -> None:
    """RuntimeError, before a blocking call to ``target`` is made, if a wiggle server answering
    there runs on the event loop running on this thread (``server_on_this_loop``): the call would
    hold the loop still and wait for an answer only that loop can give.

    The blocking ``Client``'s check, made before each of its calls (``Link.check`` in
    wiggle/_client/link.py); an ``AsyncClient``'s call hands the loop back while it waits, and its
    ``AsyncLink`` makes no such check.
    """
    server = server_on_this_loop(target)
    if server is None:
        return
    raise RuntimeError(
        f"this blocking Client call would never be answered: the wiggle server at {server} runs on "
        "the event loop of this thread (an EmbeddedServer or WorkflowEnvironment started in it), and "
        "a blocking call holds that loop still until its answer comes. In async code use AsyncClient "
        "(the server's or the environment's .client: `await env.client.start(...)`), or run the "
        "blocking call in a thread: `await asyncio.to_thread(client.start, ...)`"
    )


class Hosted(NamedTuple):
    """A server of this process as the check sees it: where it listens."""

    host: str
    ports: tuple[int, ...]


#: loop -> the servers of this process running on it (wiggle/_server/app.py adds and removes them)
_HOSTED: dict[asyncio.AbstractEventLoop, dict[int, Hosted]] = {}
_HOSTED_LOCK = threading.Lock()


def hosted(loop: asyncio.AbstractEventLoop, server: object, where: Hosted | None) -> None:
    """Record that ``server`` runs on ``loop`` and listens ``where`` (None: it stopped)."""
    with _HOSTED_LOCK:
        servers = _HOSTED.setdefault(loop, {})
        if where is None:
            servers.pop(id(server), None)
            if not servers:
                del _HOSTED[loop]
        else:
            servers[id(server)] = where


def server_on_this_loop(target: str) -> str | None:
    """The address (host:port) of a wiggle server of this process that runs on the event loop
    running on this thread and answers at ``target`` (one of its addresses, for a fail-over
    list); None if no loop runs here, or none of its servers answers there (a remote server, or
    one of another thread's loop)."""
    loop = asyncio._get_running_loop()
    if loop is None:
        return None
    with _HOSTED_LOCK:
        servers = list(_HOSTED.get(loop, {}).values())
    if not servers:
        return None
    wanted = _addresses(target)
    for server in servers:
        for port in server.ports:
            if port and any(p == port and _local(h, server.host) for h, p in wanted):
                return host_address(server.host, port)
    return None


def _addresses(target: str) -> list[tuple[str, int]]:
    """(host, port) of each address of a gRPC target: ``host:port``, ``[::1]:port``, or a list
    as wiggle/_client/targets.py joins one (``ipv4:a:1,b:2``); a ``dns:`` target too."""
    rest = target
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if rest.startswith(scheme):
            rest = rest[len(scheme) :]
            break
    found: list[tuple[str, int]] = []
    for item in rest.split(","):
        host, sep, port = item.strip().rpartition(":")
        if sep and port.isdigit():
            found.append((host.strip("[]").lower(), int(port)))
    return found


def _local(host: str, bound: str) -> bool:
    """Whether ``host`` reaches a server bound to ``bound`` on this machine: the same host, a
    loopback address or name, or the unspecified address (0.0.0.0, ::)."""
    if host in ("localhost", bound.strip("[]").lower()):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified
