"""``wiggle describe`` shows every node kind's edges: a signal wait's timeout path, a for_each's
body and join, a sub-workflow's child and its on_error path (and the older kinds' as before)."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from datetime import timedelta
from typing import Any

from wiggle import Workflow
from wiggle._cli.ops import EDGES, _edges, describe
from wiggle._client.types import WorkflowInfo
from wiggle._model import Node, NodeKind
from wiggle.testing import EmbeddedServer


def work(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


def is_big(ctx: dict[str, Any]) -> bool:
    return bool(ctx.get("big"))


CHILD = Workflow.define("describe-child").step(work).build()

FLOW = (
    Workflow.define("describe-kinds")
    .step(work, name="first")
    .wait_signal(
        "go", name="await_go", timeout=timedelta(hours=1), on_timeout=lambda b: b.step(work, name="expired")
    )
    .wait_signal("paid", key="payment")
    .for_each("items", lambda b: b.step(work, name="per_item"), name="each")
    .sub_workflow("kid", CHILD, on_error=lambda b: b.step(work, name="kid_failed"))
    .sub_workflow("pinned_kid", CHILD, version=CHILD.version)
    .build()
)


def _lines(text: str) -> dict[str, str]:
    """Each node's line by node id (the start node's line begins with "> ")."""
    rows = text.splitlines()[3:]
    return {(ln[2:].split()[0]): ln for ln in rows}


def _described() -> dict[str, str]:
    out = io.StringIO()
    describe(WorkflowInfo(FLOW.name, FLOW.version, FLOW.definition, 0), out)
    return _lines(out.getvalue())


def test_describe_shows_the_edges_of_the_newer_node_kinds() -> None:
    lines = _described()
    assert set(lines) == {n.id for n in FLOW.definition.nodes}
    assert "SIGNAL" in lines["await_go"]
    assert "on signal go -> paid; after 3600 s -> expired" in lines["await_go"]
    assert "on signal paid into payment -> each" in lines["paid"]
    assert "FOR_EACH" in lines["each"]
    assert "body per_item per element of items; joins at each.join" in lines["each"]
    assert "-> end" not in lines["each"]  # it used to claim the for_each ended the graph
    assert "joins each -> kid" in lines["each.join"]
    assert "SUB_WORKFLOW" in lines["kid"]
    assert "child describe-child -> pinned_kid; on error -> kid_failed" in lines["kid"]
    assert f"child describe-child version {CHILD.version} -> end" in lines["pinned_kid"]
    assert "on error" not in lines["pinned_kid"]


def test_every_node_kind_has_an_edge_renderer() -> None:
    assert set(EDGES) == set(NodeKind)
    for kind in NodeKind:  # and each renders a bare node of its kind without failing
        assert isinstance(_edges(Node(id="x", kind=kind)), str)


async def test_the_describe_command_shows_them() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(CHILD)
        await server.client.register(FLOW)
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "wiggle.cli", "describe", FLOW.name, "--target", server.target],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 0, run.stderr
    lines = _lines(run.stdout)
    assert lines["first"].startswith("> first")
    assert "after 3600 s -> expired" in lines["await_go"]
    assert "body per_item per element of items" in lines["each"]
    assert "on error -> kid_failed" in lines["kid"]
