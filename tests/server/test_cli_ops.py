"""The operator commands against a running server: start, get --history, list, cancel, complete-task."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

from wiggle import Workflow
from wiggle.testing import EmbeddedServer


def bump(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "n": ctx.get("n", 0) + 1}


async def wiggle(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real command in a subprocess without blocking the embedded server's loop."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "wiggle.cli", "--target", target, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_start_get_list_cancel_and_complete_task() -> None:
    approval = (
        Workflow.define("cli-approval")
        .step(bump)
        .user_task("approve", timeout=timedelta(minutes=5))
        .step(bump, name="after")
        .build()
    )
    async with EmbeddedServer() as server:
        async with server.worker([approval]):
            target = server.target
            started = await wiggle(target, "start", "cli-approval", "--context", '{"n": 1}', "--json")
            assert started.returncode == 0, started.stderr
            instance_id = json.loads(started.stdout)["instance_id"]

            async def awaiting() -> None:
                while True:
                    info = await server.client.get(instance_id)
                    if any(t.status == "AWAITING" for t in info.tokens):
                        return
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(awaiting(), 20)
            wrong = await wiggle(target, "complete-task", instance_id, "nope", "--data", "{}")
            assert wrong.returncode == 3, wrong.stderr  # NOT_FOUND: no such user task
            done = await wiggle(
                target, "complete-task", instance_id, "approve", "--data", '{"ok": true}', "--json"
            )
            assert done.returncode == 0, done.stderr
            final = await server.client.wait(instance_id, timeout=20)
            assert final.status == "COMPLETED" and final.context == {"n": 3, "ok": True}

            shown = await wiggle(target, "get", instance_id, "--history", "--json")
            assert shown.returncode == 0, shown.stderr
            body = json.loads(shown.stdout)
            assert body["instance"]["status"] == "COMPLETED"
            nodes = [e["node_id"] for e in body["history"] if e["outcome"] == "COMPLETED"]
            assert nodes == ["bump", "approve", "after"]
            text = await wiggle(target, "get", instance_id, "--history")
            # the history once: its header, then one line per entry, each entry's line once
            lines = text.stdout.splitlines()
            history = lines[lines.index("history") + 1 :]
            assert lines.count("history") == 1 and history[0].split() == [
                "ENDED",
                "NODE",
                "ATTEMPT",
                "OUTCOME",
                "TOOK",
                "WORKER",
            ]
            assert len(history) - 1 == len(body["history"]), text.stdout
            assert sum(" approve " in line for line in history) == sum(
                e["node_id"] == "approve" for e in body["history"]
            )

            second = json.loads((await wiggle(target, "start", "cli-approval", "--json")).stdout)[
                "instance_id"
            ]
            listed = await wiggle(target, "list", "--workflow", "cli-approval", "--page-size", "1", "--json")
            page = json.loads(listed.stdout)
            assert [i["instance_id"] for i in page["instances"]] == [second]  # newest first
            assert page["next_page_token"] == second
            rest = await wiggle(
                target, "list", "--workflow", "cli-approval", "--page-token", second, "--json"
            )
            assert [i["instance_id"] for i in json.loads(rest.stdout)["instances"]] == [instance_id]

            async def waits_at_approve() -> None:
                while not any(t.node_id == "approve" for t in (await server.client.get(second)).tokens):
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(waits_at_approve(), 20)
            # search: a context field's value, where it is now, top-level only
            for search, found in (
                (["--ctx", "n=1"], [second]),
                (["--ctx", "n=3", "--top-level"], [instance_id]),
                (["--node", "approve"], [second]),
                (["--text", "no such reason"], []),
            ):
                hits = await wiggle(target, "list", "--workflow", "cli-approval", *search, "--json")
                assert hits.returncode == 0, hits.stderr
                assert [i["instance_id"] for i in json.loads(hits.stdout)["instances"]] == found, search
            bad = await wiggle(target, "list", "--ctx", "no-equals-sign")
            assert bad.returncode == 2 and "--ctx takes FIELD=VALUE" in bad.stderr
            bad = await wiggle(target, "list", "--ctx", "bad-field=1")
            assert bad.returncode != 0 and "context field 'bad-field'" in bad.stderr, bad.stderr

            cancelled = await wiggle(target, "cancel", second, "--reason", "not needed", "--json")
            assert json.loads(cancelled.stdout)["changed"] is True
            again = await wiggle(target, "cancel", second, "--json")
            assert json.loads(again.stdout)["changed"] is False  # already finished: not an error
            info = await server.client.get(second)
            assert info.status == "CANCELLED" and info.reason == "not needed"

            waited = await wiggle(target, "start", "cli-approval", "--wait", "--timeout", "0.5", "--json")
            assert json.loads(waited.stdout)["status"] == "RUNNING"  # still awaiting its user task
            missing = await wiggle(target, "get", "wi-doesnotexist")
            assert missing.returncode == 3 and "NOT_FOUND" in missing.stderr
            bad = await wiggle(target, "start", "cli-approval", "--context", "[1, 2]")
            assert bad.returncode == 2 and "INVALID_ARGUMENT" in bad.stderr


async def test_health_service_reports_serving() -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with EmbeddedServer() as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            for service in ("", "wiggle.v1.WiggleControlPlane"):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_get_shows_a_childs_parent_and_the_parents_child() -> None:
    child = Workflow.define("cli-child").user_task("go").build()
    parent = Workflow.define("cli-parent").sub_workflow("call", child).build()
    async with EmbeddedServer() as server:
        client = server.client
        await client.register(child)
        await client.register(parent)
        info = await client.start(parent.name, {})
        target = server.target
        for _ in range(200):  # the clock duty starts the child
            entries = await client.history(info.instance_id)
            if entries:
                break
            await asyncio.sleep(0.05)
        child_id = entries[0].child_id
        shown = await wiggle(target, "get", info.instance_id, "--history")
        assert shown.returncode == 0, shown.stderr
        assert f"waits for child {child_id}" in shown.stdout
        assert "CHILD_STARTED" in shown.stdout and f"child: {child_id}" in shown.stdout
        kid = await wiggle(target, "get", child_id)
        assert f"parent     {info.instance_id} (token {info.instance_id}.1, depth 1)" in kid.stdout


def declined(ctx: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("card declined")


async def test_history_and_get_show_the_traceback_of_a_failed_step() -> None:
    from wiggle import RetryPolicy

    failing = Workflow.define("cli-declined").step(declined, retry=RetryPolicy.fixed(2, 0.01)).build()
    async with EmbeddedServer() as server:
        async with server.worker([failing]):
            info = await server.client.start(failing, {})
            done = await server.client.wait(info.instance_id, timeout=20)
            assert done.status == "FAILED"
        shown = await wiggle(server.target, "history", info.instance_id)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0].split() == ["ENDED", "NODE", "ATTEMPT", "OUTCOME", "TOOK", "WORKER"]
        assert [ln.split()[3:5] for ln in lines if " declined " in ln] == [["1", "RETRY"], ["2", "FAILED"]]
        assert shown.stdout.count("| Traceback (most recent call last):") == 2
        assert "in declined\n" in shown.stdout and "| RuntimeError: card declined" in shown.stdout
        brief = await wiggle(server.target, "history", info.instance_id, "--no-tracebacks")
        assert "Traceback" not in brief.stdout and "error: RuntimeError: card declined" in brief.stdout
        as_json = await wiggle(server.target, "history", info.instance_id, "--json")
        entries = json.loads(as_json.stdout)
        assert [e["outcome"] for e in entries if e["node_id"] == "declined"] == ["RETRY", "FAILED"]
        assert all(e["traceback"].startswith("Traceback") for e in entries if e["node_id"] == "declined")
        got = await wiggle(server.target, "get", info.instance_id, "--history")
        assert got.stdout.count("| Traceback (most recent call last):") == 2
        missing = await wiggle(server.target, "history", "wi-nope")
        assert missing.returncode == 3 and "instance wi-nope does not exist" in missing.stderr
