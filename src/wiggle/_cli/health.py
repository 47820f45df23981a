"""``wiggle ready``: ask a server's /readyz over its HTTP port (a health check for containers).

Exit 0 when the server answers 200, 1 when it answers that it is not ready (the detail on stderr),
5 when nothing answers. Without ``--url`` it asks 127.0.0.1 on ``--http-port`` (or the server's
own WIGGLE_HTTP_PORT), over HTTPS when the server's WIGGLE_TLS_CERT is set: the check a container
runs next to its server, with the server's environment.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import sys
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgument, Unavailable
from .common import credentials_from_args, positive_seconds_arg

__all__ = ["add_ready", "cmd_ready", "ready_url"]


def add_ready(p: argparse.ArgumentParser) -> None:
    """The options of ``wiggle ready`` on its parser ``p``."""
    p.add_argument("--url", help="the /readyz URL to ask (default: this machine's --http-port)")
    p.add_argument("--http-port", type=int, help="the server's HTTP port on 127.0.0.1 [WIGGLE_HTTP_PORT]")
    p.add_argument(
        "--timeout", type=positive_seconds_arg, default=5.0, help="seconds to wait for the answer (default 5)"
    )
    p.set_defaults(func=cmd_ready)


def ready_url(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str:
    """The URL ``wiggle ready`` asks: --url, else 127.0.0.1 at --http-port or WIGGLE_HTTP_PORT."""
    from .._server.config import server_variable

    if args.url:
        parsed = urllib.parse.urlsplit(args.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise InvalidArgument(f"--url must be an http:// or https:// URL, got {args.url!r}")
        return str(args.url)
    port = args.http_port
    if port is None:
        raw = server_variable("http_port", env)
        if not raw:
            raise InvalidArgument("give --url, or the server's --http-port (or WIGGLE_HTTP_PORT)")
        try:
            port = int(raw)
        except ValueError:
            raise InvalidArgument(f"WIGGLE_HTTP_PORT must be an integer, got {raw!r}") from None
    if not 0 < port < 65536:
        raise InvalidArgument(f"the HTTP port must be between 1 and 65535, got {port}")
    scheme = "https" if server_variable("tls_cert", env) else "http"
    return f"{scheme}://127.0.0.1:{port}/readyz"


class _Https(http.client.HTTPSConnection):
    """HTTPS to ``host`` whose certificate is checked against ``server_name`` (SNI too)."""

    def __init__(self, host: str, port: int | None, server_name: str, **kw: Any) -> None:
        super().__init__(host, port, **kw)
        self.server_name = server_name

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.server_name)  # type: ignore[attr-defined]


def cmd_ready(args: argparse.Namespace) -> int:
    url = ready_url(args)
    try:
        credentials = credentials_from_args(args)
        token = credentials.bearer()
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=credentials.ca_file or None)
        if credentials.cert_file:
            context.load_cert_chain(credentials.cert_file, credentials.key_file or None)
        name = credentials.server_name or (host if parts.hostname != "127.0.0.1" else "localhost")
        conn = _Https(host, parts.port, name, context=context, timeout=args.timeout)
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=args.timeout)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request("GET", parts.path or "/readyz", headers=headers)
        answer = conn.getresponse()
        body = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise Unavailable(f"no answer from {url}: {exc}") from None
    finally:
        conn.close()
    try:
        detail = json.loads(body)
    except ValueError:
        detail = {"detail": body.decode("utf-8", "replace").strip()[:200]}
    if args.json:
        print(json.dumps({"url": url, "status": answer.status, **detail}, sort_keys=True))
    if answer.status == 200:
        if not args.json:
            said = str(detail.get("detail", ""))
            print(f"{url}: ready" + (f" ({said})" if said and said != "ready" else ""))
        return 0
    print(f"wiggle: {url} is not ready (HTTP {answer.status}): {detail.get('detail', '')}", file=sys.stderr)
    return 1
