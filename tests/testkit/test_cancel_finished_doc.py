"""Cancelling a finished instance: what docs/semantics.md#cancellation says is what the API and
``wiggle cancel`` do. The section said it "is not an error", while ``wiggle cancel`` exits 4 on it
(docs/cli.md, exit codes): the API answers ``changed=False``, the command line calls it refused.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from pathlib import Path

from wiggle import Workflow
from wiggle.testing import WorkflowEnvironment

SEMANTICS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"


def _section() -> str:
    text = SEMANTICS.read_text()
    found = re.search(r"^## Cancellation\n(.*?)^## ", text, re.S | re.M)
    assert found is not None, "docs/semantics.md has no Cancellation section"
    return " ".join(found.group(1).split())


def _done(ctx: dict[str, object]) -> dict[str, object]:
    return ctx


async def test_cancelling_a_finished_instance_is_changed_false_and_exit_4_as_documented() -> None:
    bp = Workflow.define(f"finished-{uuid.uuid4().hex[:6]}").step(_done).build()
    async with WorkflowEnvironment([bp]) as env:
        done = await env.run(bp, {})
        info, changed = await env.client.cancel(done)
        assert (info.status, changed) == ("COMPLETED", False)  # no error from the API
        cli = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "wiggle.cli", "cancel", done.instance_id, "--target", env.target],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert cli.returncode == 4, cli.stdout + cli.stderr
    assert f"wiggle: {done.instance_id} already COMPLETED; nothing changed" in cli.stderr
    said = _section()
    assert "`changed=false`" in said and "`client.cancel` returns `(info, False)`" in said, said
    assert (
        '`wiggle cancel` treats it as refused by the state: it prints "wiggle: ID already COMPLETED; ' in said
    )
    assert "exits 4" in said, said
    assert "it is not an error" not in said, said
