"""Bulk and idempotent starts over the wire: the clients' start_many and request_id, the
StartInstances RPC's bad input, and ``wiggle start --from-file`` (a real server, a real CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import msgspec
import pytest
from pg import STORES, TEST_DATABASE_URL, async_temp_schema

from wiggle import Client, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer


def double(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx["n"] * 2}


FLOW = Workflow.define("bulk").step(double).build()


@pytest.fixture(params=STORES)
async def server(request: pytest.FixtureRequest) -> AsyncIterator[EmbeddedServer]:
    async with contextlib.AsyncExitStack() as stack:
        settings: dict[str, Any] = {"max_payload_bytes": 4096}
        if request.param == "postgres":
            settings["database_url"] = TEST_DATABASE_URL
            settings["database_schema"] = await stack.enter_async_context(async_temp_schema())
        server = await stack.enter_async_context(EmbeddedServer(**settings))
        await server.client.register(FLOW)
        yield server


async def test_start_many_in_chunks_runs_every_instance_in_order(server: EmbeddedServer) -> None:
    client = server.client
    ids = await client.start_many(FLOW, ({"n": i} for i in range(53)), chunk_size=10)
    assert len(ids) == len(set(ids)) == 53
    async with server.worker([FLOW]):
        for i in (0, 9, 10, 52):
            info = await client.result(ids[i], timeout=30)
            assert info.context == {"n": 2 * i}


async def test_a_context_over_the_limit_is_named_by_its_index_in_the_whole_list(
    server: EmbeddedServer,
) -> None:
    """The server's refusal named the wire field and the index in the chunk ("contexts_json[1] is
    5012 bytes"); it names the caller's context and says which contexts were started."""
    contexts = [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3, "x": "y" * 5000}]
    with pytest.raises(InvalidArgument) as refused:
        await server.client.start_many(FLOW, contexts, chunk_size=2, request_id="big-bulk")
    text = str(refused.value)
    assert text.startswith("context 3 is ") and "the limit is 4096 bytes" in text, text
    assert text.endswith(
        "; contexts 0 to 1 were started (repeated with the same request_id, the call starts only the rest)"
    ), text
    assert "contexts_json" not in text


async def test_start_many_with_a_request_id_repeats_safely(server: EmbeddedServer) -> None:
    client = server.client
    first = await client.start_many(FLOW, [{"n": i} for i in range(7)], request_id="load-1", chunk_size=3)
    again = await client.start_many(FLOW, [{"n": i} for i in range(9)], request_id="load-1", chunk_size=4)
    assert again[:7] == first
    assert len(set(again)) == 9
    page, _ = await client.list(workflow="bulk", page_size=100)
    assert len(page) == 9


async def test_start_with_a_request_id_returns_the_first_instance(server: EmbeddedServer) -> None:
    client = server.client
    a = await client.start(FLOW, {"n": 1}, request_id="pay-42")
    b = await client.start(FLOW, {"n": 5}, request_id="pay-42")
    assert b.instance_id == a.instance_id and b.context == {"n": 1}
    with pytest.raises(InvalidArgument, match="request_id"):
        await client.start(FLOW, {"n": 1}, request_id="bad id with spaces")


async def test_bad_bulk_starts_are_refused_and_start_nothing(server: EmbeddedServer) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = pb_grpc.WiggleControlPlaneStub(channel)

        async def fails(request: pb.StartInstancesRequest, code: grpc.StatusCode) -> str:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.StartInstances(request, timeout=10)
            assert err.value.code() == code, err.value.details()
            return err.value.details() or ""

        ok = msgspec.json.encode({"n": 1})
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        assert "between 1 and 10000" in await fails(pb.StartInstancesRequest(workflow="bulk"), invalid)
        assert "contexts_json[1]" in await fails(
            pb.StartInstancesRequest(workflow="bulk", contexts_json=[ok, b"[1]", ok]), invalid
        )
        assert "contexts_json[0]" in await fails(
            pb.StartInstancesRequest(workflow="bulk", contexts_json=[b"{" * 3]), invalid
        )
        assert "4096" in await fails(
            pb.StartInstancesRequest(workflow="bulk", contexts_json=[ok, b'{"x": "' + b"y" * 5000 + b'"}']),
            invalid,
        )
        assert "first_index" in await fails(
            pb.StartInstancesRequest(workflow="bulk", contexts_json=[ok], first_index=-1), invalid
        )
        assert "request_id" in await fails(
            pb.StartInstancesRequest(workflow="bulk", contexts_json=[ok], request_id=" x"), invalid
        )
        assert "nope" in await fails(
            pb.StartInstancesRequest(workflow="nope", contexts_json=[ok]), grpc.StatusCode.NOT_FOUND
        )
        page = await stub.ListInstances(pb.ListInstancesRequest(page_size=100), timeout=10)
        assert list(page.instances) == []


def test_start_many_refuses_a_chunk_size_below_one() -> None:
    with Client("127.0.0.1:1") as client, pytest.raises(ValueError, match="chunk_size"):
        client.start_many("bulk", [{}], chunk_size=0)


async def _wiggle(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wiggle.cli", "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_starts_from_a_json_lines_file(server: EmbeddedServer, tmp_path: Path) -> None:
    good = tmp_path / "orders.jsonl"
    good.write_text("".join(json.dumps({"n": i}) + "\n" + ("\n" if i == 2 else "") for i in range(5)))
    done = await _wiggle(server.target, "start", "bulk", "--from-file", str(good), "--request-id", "f1")
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert len(ids) == 5
    again = await _wiggle(
        server.target, "start", "bulk", "--from-file", str(good), "--request-id", "f1", "--json"
    )
    assert json.loads(again.stdout) == ids
    for i in (0, 4):
        assert (await server.client.get(ids[i])).context == {"n": i}

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"n": 1}\n[2]\n')
    refused = await _wiggle(server.target, "start", "bulk", "--from-file", str(bad))
    assert refused.returncode != 0
    assert "line 2 must be a JSON object" in refused.stderr
    page, _ = await server.client.list(workflow="bulk", page_size=100)
    assert len(page) == 5
