"""A worker's first contact with its server: register the blueprints, waiting for a server that
is not there yet (wiggle/_worker/worker.py calls it from ``Worker.start``).

Servers and workers of one deployment start in any order (a compose file, a Kubernetes rollout,
a host's boot): a worker that finds no server answering (UNAVAILABLE) says so once and asks
again every second, for up to ``WorkerOptions.connect_seconds``, rather than exiting at once and
leaning on a restart policy. Any other answer (a wrong credential, a graph the server refuses)
is a mistake to report at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from .._client import messages
from .._workflow_compile import registration_order
from ..client import AsyncClient
from ..errors import PermissionDenied, Unavailable
from ..workflow import Blueprint

__all__ = ["register_when_reachable", "AGAIN_EVERY"]

log = logging.getLogger("wiggle.worker")

AGAIN_EVERY = 1.0  # seconds between tries while no server answers


async def register_when_reachable(
    client: AsyncClient, blueprints: Iterable[Blueprint[Any]], connect_seconds: float
) -> None:
    """Register each blueprint (a no-op for one registered already), children before parents. While the server answers
    UNAVAILABLE, ask again every second; after ``connect_seconds`` of that (0: ask once), raise
    Unavailable naming the target. A worker identity without the admin role skips registering
    (PermissionDenied: an admin registers the workflows), with a warning."""
    since: float | None = None  # when the server was first found away
    for bp in registration_order(blueprints):  # a sub-workflow's child before its parent
        while True:
            try:
                await _register_once(client, bp)
                break
            except PermissionDenied as exc:
                log.warning("not registering %s: %s", bp.name, exc)
                break
            except Unavailable as exc:
                now = time.monotonic()
                if since is None:
                    since = now
                    if connect_seconds > 0:
                        log.warning(
                            "no server answers at %s yet (%s); asking again every second for %g s",
                            client.target,
                            exc,
                            connect_seconds,
                        )
                if now - since >= connect_seconds:
                    raise Unavailable(
                        f"no server answered at {client.target} within {connect_seconds:g} s "
                        f"(WorkerOptions.connect_seconds, WIGGLE_WORKER_CONNECT_SECONDS): {exc}"
                    ) from None
                await asyncio.sleep(min(AGAIN_EVERY, since + connect_seconds - now))
    if since is not None:
        log.info("server at %s answered after %.1f s", client.target, time.monotonic() - since)


async def _register_once(client: AsyncClient, blueprint: Blueprint[Any]) -> None:
    """One RegisterWorkflow call through the client's one call path (its errors, its trace
    context): not ``client.register``, which asks again by itself while the server is away (for
    3 s when it has never answered), for this loop keeps the time."""
    await client._call(client.stub.RegisterWorkflow, messages.register_request(blueprint))
