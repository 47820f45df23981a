"""``wiggle queues set-limit``, what ``wiggle queues`` shows of the limits in use, and ``wiggle
start --workflow-timeout`` against a running server (docs/flow-control.md#queue-limits,
#concurrency-limits, #a-starts-own-time-limit)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import grpc
from limited_queues import HOLDER, LONG_LEASE_MILLIS, RATE_HOLDER, hold_limited_queues

from wiggle import RateLimit, Workflow
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.testing import EmbeddedServer

from .test_cli_ops import wiggle


async def test_set_limit_shows_the_limits_and_clear_removes_them() -> None:
    async with EmbeddedServer() as server:
        target = server.target
        set_ = await wiggle(target, "queues", "set-limit", "stripe", "--rate", "50/1s", "--max-running", "4")
        assert set_.returncode == 0, set_.stderr
        assert "at most 4 running (0 in use); 50 claims per 1 s" in set_.stdout
        shown = await wiggle(target, "queues", "--json")
        [stripe] = [q for q in json.loads(shown.stdout) if q["queue"] == "stripe"]
        assert (stripe["max_running"], stripe["rate_max"], stripe["rate_period_millis"]) == (4, 50, 1000)
        per_minute = await wiggle(target, "queues", "set-limit", "stripe", "--rate", "600/m")
        assert per_minute.returncode == 0 and "600 claims per 60 s" in per_minute.stdout, per_minute
        cleared = await wiggle(target, "queues", "set-limit", "stripe", "--clear")
        assert cleared.returncode == 0, cleared.stderr
        assert "stripe" not in [
            q["queue"] for q in json.loads((await wiggle(target, "queues", "--json")).stdout)
        ]
        for bad, words in [
            (["--rate", "fifty/s"], "is not N/PERIOD"),
            ([], "say what to limit"),
            (["--clear", "--max-running", "2"], "--clear removes"),
            (["--rate", "5/-1s"], "the period must be from 1ms to 1d"),
        ]:
            refused = await wiggle(target, "queues", "set-limit", "stripe", *bad)
            assert refused.returncode == 2, (bad, refused.stdout, refused.stderr)
            assert words in refused.stderr, (bad, refused.stderr)


def test_set_limit_names_the_flag_and_the_value_typed_and_what_is_allowed() -> None:
    """An outside trial: ``--rate 5/x`` said "--rate period '1x' is not a duration" (a 1 nobody
    typed), ``--rate 0/1s`` "rate_period_millis without rate_max" (the API's fields), and
    ``--max-running 0`` "say what to limit". Each is refused before any call (the target is
    nothing), naming the flag and the value as typed."""
    for bad, words in [
        (["--rate", "5/x"], ["--rate '5/x'", "the period 'x' is not a duration", "50/1s"]),
        (["--rate", "0/1s"], ["--rate '0/1s' allows no claims", "from 1 to", "--clear"]),
        (["--max-running", "0"], ["--max-running 0 limits nothing", "from 1 to", "--clear"]),
        (["--rate", "5/2d"], ["--rate '5/2d'", "from 1ms to 1d"]),
        # rounded to 1 ms and 2 ms before (an outside trial)
        (["--rate", "5/0.6ms"], ["--rate '5/0.6ms'", "from 1ms to 1d"]),
        (["--rate", "5/0.0016s"], ["--rate '5/0.0016s'", "1.6 ms", "whole number of milliseconds", "2ms"]),
    ]:
        refused = subprocess.run(
            [
                sys.executable,
                "-m",
                "wiggle.cli",
                "queues",
                "set-limit",
                "jobs",
                *bad,
                "--target",
                "127.0.0.1:1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2, (bad, refused.stderr)
        for word in words:
            assert word in refused.stderr, (bad, word, refused.stderr)
        assert "rate_period_millis" not in refused.stderr and "1x" not in refused.stderr


async def test_start_takes_the_instances_own_time_limit() -> None:
    flow = Workflow.define("cli-timed", timeout=3600).user_task("approve").build()
    async with EmbeddedServer() as server:
        await server.client.register(flow)
        started = await wiggle(server.target, "start", "cli-timed", "--workflow-timeout", "1s", "--json")
        assert started.returncode == 0, started.stderr
        done = await server.client.wait(json.loads(started.stdout)["instance_id"], timeout=30)
    assert done.status == "FAILED" and done.reason == "workflow timed out", done
    assert "1 s" in done.error


async def test_queues_shows_the_limits_in_use_the_key_slots_and_the_rate_wait() -> None:
    async with EmbeddedServer(lease_millis=LONG_LEASE_MILLIS) as server:
        scene = await hold_limited_queues(server.client, "cli-limits")
        text = await wiggle(server.target, "queues")
        shown = await wiggle(server.target, "queues", "--json")
    assert text.returncode == 0 and shown.returncode == 0, (text.stderr, shown.stderr)
    lines = text.stdout.splitlines()
    keyed = lines[[line.split()[0] for line in lines].index(scene.keyed) :]
    assert keyed[0].split() == [scene.keyed, "2", "0", keyed[0].split()[3], "s", "2", "0", "1"], keyed
    assert (
        keyed[1]
        == "  limits: at most 3 running (2 in use); 2 running under a key's limit, 2 waiting for their key"
    )
    assert keyed[2].startswith(f"  worker {HOLDER}: 2 in flight, last poll "), keyed
    until = datetime.fromtimestamp(scene.rate_limited_until / 1000, tz=timezone.utc)
    rated = lines[[line.split()[0] for line in lines].index(scene.rated) :]
    assert rated[0].split()[1:] == ["1", "0", rated[0].split()[3], "s", "1", "0", "1"], rated
    assert rated[1] == (
        f"  limits: 1 claims per 3600 s; rate limited until {until.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z"
    )
    assert rated[2].startswith(f"  worker {RATE_HOLDER}: 1 in flight, last poll "), rated
    rows = {q["queue"]: q for q in json.loads(shown.stdout)}
    assert {k: rows[scene.keyed][k] for k in ("max_running", "running", "limit_held", "limit_waiting")} == {
        "max_running": 3,
        "running": 2,
        "limit_held": 2,
        "limit_waiting": 2,
    }
    assert rows[scene.rated]["rate_limited_until"] == scene.rate_limited_until
    assert (rows[scene.rated]["rate_max"], rows[scene.rated]["rate_period_millis"]) == (1, 3_600_000)


async def test_queues_shows_the_steps_waiting_for_their_keys_rate() -> None:
    flow = (
        Workflow.define("cli-key-rate")
        .step(lambda ctx: ctx, name="call", rate_limit=RateLimit(key="merchant", max=1, period=3600.0))
        .build()
    )
    async with EmbeddedServer() as server:
        await server.client.register(flow)
        for _ in range(3):
            await server.client.start(flow, {"merchant": "m1"})
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            claimed = await stub.PollTasks(
                pb.PollTasksRequest(worker_id="raw", queues=["cli-key-rate"], max_tasks=3, wait_millis=1000)
            )
        [stat] = [q for q in await server.client.queues() if q.queue == "cli-key-rate"]
        text = await wiggle(server.target, "queues")
    assert len(claimed.tasks) == 1  # the key's one claim an hour
    assert stat.rate_waiting == 2 and stat.rate_waiting_until > 0, stat
    until = datetime.fromtimestamp(stat.rate_waiting_until / 1000, tz=timezone.utc)
    stamp = until.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    assert f"  limits: 2 waiting for their key's rate, the next at {stamp}Z" in text.stdout.splitlines(), (
        text.stdout
    )
