"""/api/cluster showed each node's ``address`` as the host it connects to the database from
("127.0.0.1"), with no port: among three servers on one host nobody could tell which was the clock
leader (an outside operator trial). The answering node now gives its gRPC address, and a server
logs its node id at start (wiggle/_server/web/api.py ``cluster_page``, wiggle/_server/app.py)."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from pg import TEST_DATABASE_URL

from .helpers import dashboard_server


async def test_the_answering_node_gives_its_grpc_address(
    store: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="wiggle.server"):
        async with dashboard_server(store, pg_schema, TEST_DATABASE_URL) as (server, base):
            async with aiohttp.ClientSession() as http, http.get(f"{base}/api/cluster") as answer:
                cluster: dict[str, Any] = await answer.json()
            async with aiohttp.ClientSession() as http, http.get(f"{base}/cluster") as answer:
                page = await answer.text()
    (me,) = [n for n in cluster["nodes"] if n["this_node"]]
    assert me["grpc_address"] == server.target, me
    assert all(n["grpc_address"] == "" for n in cluster["nodes"] if not n["this_node"]), cluster
    assert f"{me['node_id']} (this node, gRPC {server.target})" in page, page
    if store == "postgres":
        assert f"this node is {me['node_id']} (gRPC {server.target})" in caplog.text, caplog.text
