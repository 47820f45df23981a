"""The statuses a client returns are the public enums (wiggle.InstanceStatus, wiggle.TokenStatus),
str enums that still compare equal to the plain strings users compared against before."""

from __future__ import annotations

import msgspec

from wiggle import InstanceStatus, TokenStatus, Workflow
from wiggle.testing import EmbeddedServer


def _step(ctx: dict) -> dict:
    return ctx


PARKED = Workflow.define("public-status").step(_step, queue="nobody-serves-this").build()


async def test_a_client_returns_the_public_status_enums() -> None:
    async with EmbeddedServer() as server:
        await server.client.register(PARKED)
        started = await server.client.start(PARKED, {})
        info = await server.client.get(started.instance_id)
        assert info.status is InstanceStatus.RUNNING and info.status == "RUNNING"
        (token,) = info.tokens
        assert token.status is TokenStatus.READY and token.status == "READY"
        assert not info.finished
        await server.client.cancel(started.instance_id)
        done = await server.client.get(started.instance_id)
        assert done.status is InstanceStatus.CANCELLED and done.finished
        # encoded as the plain value (the CLI's --json, a user's own JSON)
        assert msgspec.json.decode(msgspec.json.encode(done))["status"] == "CANCELLED"
        assert f"{done.status}" == "CANCELLED"
