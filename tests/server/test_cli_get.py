"""``wiggle get``: each token says its queue (READY, RUNNING) and when it is next due (a backoff's
or a release's end, a sleep's end) or its deadline, as docs/operations.md's stuck-instance
runbook reads them."""

from __future__ import annotations

from wiggle import Workflow
from wiggle.testing import EmbeddedServer

from .test_cli_ops import wiggle

PARKED = Workflow.define("get-parked").step(lambda ctx: ctx, name="price", queue="nobody-serves").build()
NAPPING = Workflow.define("get-napping").sleep("nap", 3600).build()
ASKING = Workflow.define("get-asking").user_task("approve", timeout=600).build()


async def test_get_shows_each_token_queue_and_when_it_is_due() -> None:
    async with EmbeddedServer() as server:
        ids = {}
        for flow in (PARKED, NAPPING, ASKING):
            await server.client.register(flow)
            ids[flow.name] = (await server.client.start(flow, {})).instance_id
        shown = {name: await wiggle(server.target, "get", iid) for name, iid in ids.items()}
    lines = {
        name: [line for line in out.stdout.splitlines() if line.startswith("  token ")]
        for name, out in shown.items()
    }
    assert lines["get-parked"][0].endswith(": READY (attempt 1) on queue nobody-serves"), lines
    assert ": WAITING (attempt 1); next 20" in lines["get-napping"][0], lines
    assert ": AWAITING (attempt 1); deadline 20" in lines["get-asking"][0], lines


def test_history_labels_a_failure_as_an_error_and_anything_else_as_a_note() -> None:
    import io

    from wiggle._cli.views import print_history
    from wiggle._client.types import HistoryEntry

    def entry(outcome: str, text: str) -> HistoryEntry:
        return HistoryEntry("t", "n", "TASK", 1, "w", 1, 2, outcome, text)

    out = io.StringIO()
    print_history([entry("RETRY", "boom"), entry("BEGAN", "a concurrency slot of k=1 was free")], out)
    lines = out.getvalue().splitlines()
    assert "      error: boom" in lines and "      note: a concurrency slot of k=1 was free" in lines, lines
