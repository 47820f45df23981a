"""A list of instances does not read or send their contexts unless asked (ListInstances'
``omit_context``, ``client.list(with_context=False)``), on every store; its parent and schedule
filters; ``wiggle list`` asks without contexts for its table (docs/performance.md#listing-instances)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pg import STORES, TEST_DATABASE_URL
from pg import pg_schema as pg_schema  # noqa: F401  (a fixture)

from wiggle import Workflow, cli
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._storage.base import InstanceQuery
from wiggle._wire.replies import instance_from_pb
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer

#: big enough that reading it shows, small enough for a quick test
BIG = {"records": [{"id": i, "name": f"record {i}", "tags": ["a", "b"]} for i in range(2000)]}


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _settings(store: str, schema: str) -> dict[str, Any]:
    if store == "postgres":
        return {"database_url": TEST_DATABASE_URL, "database_schema": schema}
    return {}


def _stub(server: EmbeddedServer) -> Any:
    return server.client.stub  # the client's own gRPC stub: the answer as the wire carries it


async def test_a_list_without_contexts_neither_reads_nor_sends_them(store: str, pg_schema: str) -> None:  # noqa: F811
    flow = Workflow.define(f"list-bare-{store}").user_task("hold").build()
    async with EmbeddedServer(**_settings(store, pg_schema)) as server:
        client = server.client
        await client.register(flow)
        iid = (await client.start(flow, BIG)).instance_id

        # the store: the instance without its context (and PostgreSQL never selects the column)
        the_store = server.server.instances.store
        texts: list[str] = []
        if store == "postgres":
            fetch = the_store.db.fetch

            async def recorded(name: str, text: str, *args: Any, **kw: Any) -> Any:
                if name == "list_instances":  # not the server's own background reads
                    texts.append(text)
                return await fetch(name, text, *args, **kw)

            the_store.db.fetch = recorded
        views, _ = await the_store.list_instances(InstanceQuery(workflow=flow.name, with_context=False))
        assert [v.instance.id for v in views] == [iid]
        assert views[0].instance.context == {}
        if store == "postgres":
            (text,) = texts
            inner = text.split("FROM (SELECT ", 1)[1].split(" FROM ", 1)[0]
            columns = [c.strip() for c in inner.split(",")]
            assert "context" not in columns and "joins" not in columns, inner
            assert "'{}'::bytea AS context" in columns, inner
            the_store.db.fetch = fetch
        # ... and the instance it keeps is untouched (the memory store hands out its own objects)
        assert (await the_store.get_instance(iid)).instance.context == BIG

        # the wire: context_json empty when left out, the whole context by default
        bare = await _stub(server).ListInstances(
            pb.ListInstancesRequest(workflow=flow.name, omit_context=True)
        )
        assert [i.instance_id for i in bare.instances] == [iid] and bare.instances[0].context_json == b""
        full = await _stub(server).ListInstances(pb.ListInstancesRequest(workflow=flow.name))
        assert json.loads(full.instances[0].context_json) == BIG

        # the client: contexts by default (as before), none when asked without
        (listed,), _ = await client.list(workflow=flow.name)
        assert listed.context == BIG
        (listed,), _ = await client.list(workflow=flow.name, with_context=False)
        assert listed.instance_id == iid and listed.context == {} and listed.status == "RUNNING"


async def test_a_context_filter_still_works_without_contexts(store: str, pg_schema: str) -> None:  # noqa: F811
    flow = Workflow.define(f"list-bare-ctx-{store}").user_task("hold").build()
    async with EmbeddedServer(**_settings(store, pg_schema)) as server:
        await server.client.register(flow)
        wanted = (await server.client.start(flow, {"customer": "c-1", **BIG})).instance_id
        await server.client.start(flow, {"customer": "c-2"})
        found, _ = await server.client.list(
            workflow=flow.name, context={"customer": "c-1"}, with_context=False
        )
        assert [(i.instance_id, i.context) for i in found] == [(wanted, {})]


async def test_list_by_parent_and_by_schedule(store: str, pg_schema: str) -> None:  # noqa: F811
    child = Workflow.define(f"list-kid-{store}").user_task("hold").build()
    parent = Workflow.define(f"list-parent-{store}").sub_workflow("call", child).build()
    async with EmbeddedServer(**_settings(store, pg_schema)) as server:
        client = server.client
        await client.register(child)
        await client.register(parent)
        p1 = (await client.start(parent, {})).instance_id
        p2 = (await client.start(parent, {})).instance_id
        await client.start(child, {})  # a child of no parent

        async def kids(of: str) -> list[str]:
            found, _ = await client.list(parent_id=of, with_context=False)
            return [i.instance_id for i in found]

        for _ in range(400):  # the parents start their children as they run
            if len(await kids(p1)) == 1 and len(await kids(p2)) == 1:
                break
            await asyncio.sleep(0.05)
        (k1,) = await kids(p1)
        (k2,) = await kids(p2)
        assert k1 != k2
        assert (await client.get(k1)).parent_id == p1 and (await client.get(k2)).parent_id == p2
        with pytest.raises(InvalidArgument, match="give one of them"):
            await client.list(parent_id=p1, top_level=True)

        await client.create_schedule(f"list-sched-{store}", child.name, {}, cron="0 3 * * *")
        started = await client.trigger_schedule(f"list-sched-{store}")
        found, _ = await client.list(schedule_id=f"list-sched-{store}", with_context=False)
        assert [i.instance_id for i in found] == [started.instance_id]
        with pytest.raises(InvalidArgument, match="disagree"):
            await client.list(schedule_id=f"list-sched-{store}", correlation_id="other")


def test_cli_list_table_asks_without_contexts_and_json_with(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table shows no context, so it asks for none; --json prints them, --no-context not."""
    asked: list[dict[str, Any]] = []

    class FakeClient:
        def __enter__(self) -> FakeClient:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def list(self, **kw: Any) -> tuple[list[Any], str]:
            asked.append(kw)
            info = instance_from_pb(
                pb.InstanceInfo(
                    instance_id="wi-1",
                    workflow="w",
                    version="v",
                    status="RUNNING",
                    context_json=b'{"k": 1}' if kw["with_context"] else b"",
                )
            )
            return [info], ""

    from wiggle._cli import instances

    monkeypatch.setattr(instances, "client_from_args", lambda args: FakeClient())
    assert cli.main(["list", "--parent", "wi-p", "--schedule", "nightly", "--created-after", "1000"]) == 0
    assert asked[-1]["with_context"] is False
    assert (asked[-1]["parent_id"], asked[-1]["schedule_id"], asked[-1]["created_after"]) == (
        "wi-p",
        "nightly",
        1000,
    )
    capsys.readouterr()
    assert cli.main(["list", "--json"]) == 0
    assert asked[-1]["with_context"] is True
    assert json.loads(capsys.readouterr().out)["instances"][0]["context"] == {"k": 1}
    assert cli.main(["list", "--json", "--no-context"]) == 0
    assert asked[-1]["with_context"] is False
    assert "context" not in json.loads(capsys.readouterr().out)["instances"][0]
