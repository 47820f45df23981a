"""Opening the server's HTTP port (WIGGLE_HTTP_PORT): the dashboard when its extra is there.

With aiohttp (the ``dashboard`` extra) the port serves /metrics, /healthz, /readyz, the dashboard
and its JSON API on the server's event loop (wiggle/_server/web/). Without it, /metrics alone in
prometheus-client's thread, as before. Without either, nothing, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._urls import bare_host, host_address

if TYPE_CHECKING:
    from .app import WiggleServer

__all__ = ["HttpPort", "open_http_port"]

log = logging.getLogger("wiggle.server")


class HttpPort(Protocol):
    """What the server keeps of its HTTP port: the bound port and a way to close it."""

    port: int

    async def close(self) -> None: ...


class _Dashboard:
    def __init__(self, side: Any) -> None:
        self.side = side
        self.port: int = side.port

    async def close(self) -> None:
        await self.side.stop()


class _MetricsThread:
    def __init__(self, http_server: Any, port: int) -> None:
        self.http_server = http_server
        self.port = port

    async def close(self) -> None:
        self.http_server.shutdown()


def _metrics_text(server: WiggleServer) -> Callable[[], bytes] | None:
    try:
        from .metrics_http import metrics_text
    except ImportError:
        return None
    return metrics_text(server)


async def open_http_port(server: WiggleServer) -> HttpPort | None:
    """Serve the HTTP port of ``server`` on config.host:config.http_port."""
    config = server.config
    try:
        from .web.api import Sources
        from .web.http import HttpSide
    except ImportError as exc:
        try:
            from .metrics_http import start_metrics_server
        except ImportError as exc2:
            log.warning(
                "WIGGLE_HTTP_PORT is set but neither the dashboard nor metrics are installed: %s", exc2
            )
            return None
        log.warning("the dashboard is unavailable (%s): pip install 'wiggle-workflows[dashboard]'", exc)
        http_server = start_metrics_server(
            bare_host(config.host), config.http_port, server, server.http_security
        )
        return _MetricsThread(http_server, http_server.server_address[1])
    sources = Sources(server.instances, server.service.pollers, getattr(server, "lag", None), server.target)
    security = server.http_security
    side = HttpSide(server.instances, sources, _metrics_text(server), server.serving, security, config)
    await side.start(bare_host(config.host), config.http_port)
    scheme = "https" if security is not None and security.tls is not None else "http"
    log.info("dashboard and /metrics on %s://%s/", scheme, host_address(config.host, side.port))
    return _Dashboard(side)
