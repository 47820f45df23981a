"""A server whose start fails part-way stops what it had started (wiggle/_server/app.py ``start``).

Its HTTP port (dashboard, /metrics, /readyz) opens last, after the gRPC port is serving and the
clock duties run. With the HTTP port taken, ``start`` raised, and the gRPC server it had started
went on answering on its port, unowned, until the garbage collector met it in some later test
("Event loop is closed" from ``Server.__del__``, in a CI run)."""

from __future__ import annotations

import socket

import pytest
from ports import free_port

from wiggle import FailedPrecondition
from wiggle._server.app import WiggleServer
from wiggle._server.config import ServerConfig


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def test_a_start_refused_its_http_port_closes_the_grpc_port_it_had_opened() -> None:
    http_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", http_port))
        taken.listen()
        server = WiggleServer(ServerConfig(host="127.0.0.1", port=0, http_port=http_port))
        with pytest.raises(FailedPrecondition, match="--http-port"):  # one line, exit 4 from the CLI
            await server.start()
    assert server.port > 0  # the gRPC port had been bound and served
    assert not _answers(server.port)
    assert not server.serving()
