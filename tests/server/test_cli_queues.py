"""``wiggle queues``: each worker with the age of its last poll; the WORKERS column leaves out
those that stopped polling (the server lists a worker for 10 minutes after its last poll)."""

from __future__ import annotations

import io

import grpc
from mixed_fleet_versions import mixed_versions

from wiggle._cli.ops import print_queues
from wiggle._client.types import PassedOver, QueueInfo, QueueWorker
from wiggle._rpc import wiggle_pb2 as pb
from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
from wiggle.testing import EmbeddedServer

from .test_cli_ops import wiggle

NOW = 1_800_000_000_000


def test_each_worker_shows_its_last_poll_and_those_gone_quiet_are_counted_apart() -> None:
    queue = QueueInfo(
        queue="orders",
        ready=0,
        delayed=0,
        oldest_ready_age_millis=0,
        running=3,
        in_local_run=0,
        workers=(
            QueueWorker("polling", NOW - 2_500, 0),
            QueueWorker("stopped", NOW - 4 * 60_000, 0),
            QueueWorker("busy", NOW - 5 * 60_000, 3),  # every slot busy: it does not poll
        ),
    )
    out = io.StringIO()
    print_queues([queue], out, now=NOW)
    lines = out.getvalue().splitlines()
    assert lines[1].split()[-4:] == ["2", "(+1", "not", "polling)"], lines
    assert lines[2:] == [
        "  worker polling: 0 in flight, last poll 2.5 s ago",
        "  worker stopped: 0 in flight, last poll 4.0 min ago (not polling: stopped?)",
        "  worker busy: 3 in flight, last poll 5.0 min ago (every slot busy, or stopped)",
    ]


async def test_the_command_shows_the_age_of_a_poll() -> None:
    async with EmbeddedServer() as server:
        async with grpc.aio.insecure_channel(server.target) as channel:
            stub = pb_grpc.WiggleControlPlaneStub(channel)
            await stub.PollTasks(
                pb.PollTasksRequest(worker_id="w-age", queues=["aged"], max_tasks=1, wait_millis=0),
                timeout=10,
            )
        shown = await wiggle(server.target, "queues")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    row = lines[[line.split()[0] for line in lines].index("aged") :]
    assert row[0].split()[-1] == "1", row
    assert row[1].startswith("  worker w-age: 0 in flight, last poll ") and row[1].endswith(" s ago"), row


async def test_the_command_names_the_nodes_a_worker_passes_over(eventually) -> None:
    """An old worker gave back a new version's new step: ``wiggle queues`` and the client say which."""
    old, new = mixed_versions("cli-passes-over")
    async with EmbeddedServer() as server:
        await server.client.register(new)
        await server.client.start(new, {})
        async with server.worker([old]) as worker:

            async def noted() -> bool:
                return bool(server.server.instances.delivery.unrunnable.holds(worker.worker_id))

            await eventually(noted, what="the old worker to give 'extra' back")
            (queue,) = [q for q in await server.client.queues() if q.queue == old.name]
            shown = await wiggle(server.target, "queues")
            as_json = await wiggle(server.target, "queues", "--json")
    (seen,) = [w for w in queue.workers if w.worker_id == worker.worker_id]
    (held,) = seen.passes_over
    assert isinstance(held, PassedOver)
    assert (held.workflow, held.version, held.node) == (new.name, new.version, "extra")
    assert shown.returncode == 0, shown.stderr
    line = f"    no handler: passes over extra of {new.name} version {new.version} (offered again in "
    assert any(text.startswith(line) and text.endswith(" s)") for text in shown.stdout.splitlines()), (
        shown.stdout
    )
    assert as_json.returncode == 0 and '"passes_over"' in as_json.stdout and '"held_until"' in as_json.stdout
