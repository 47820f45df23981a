"""An instance page offers the actions its caller's roles allow (found by an outside trial: a
viewer saw cancel, complete and signal buttons, each answering 403 when clicked)."""

from __future__ import annotations

from typing import Any

from security.conftest import Pki, pki  # noqa: F401  (pki: a fixture)

from wiggle import Workflow

from .helpers import call, secured_server, tls_client, until

WAITS = Workflow.define("page-actions").user_task("approve").wait_signal("go").build()


async def test_each_role_is_offered_only_what_it_may_do(pki: Pki) -> None:  # noqa: F811
    async with secured_server("memory", "", "", pki) as (server, base):
        async with pki.client(server.target, "ops") as admin:
            await admin.register(WAITS)
            iid = (await admin.start(WAITS, {})).instance_id

        async def awaiting() -> bool:
            return any(t.status == "AWAITING" for t in (await server.instances.get_instance(iid)).tokens)

        await until(awaiting)
        tls = tls_client(pki)

        async def offered(who: str) -> tuple[dict[str, Any], str]:
            auth = {"Authorization": f"Bearer tok-{who}"}
            status, _, data = await call("GET", f"{base}/api/instances/{iid}", tls, headers=auth)
            assert status == 200, data
            status, _, page = await call("GET", f"{base}/instances/{iid}", tls, headers=auth)
            assert status == 200, page
            acts = data["actions"]
            return {k: acts[k] for k in ("cancel", "complete_user_task", "retry", "signal")}, page

        viewer, page = await offered("watcher")
        assert viewer == {"cancel": False, "complete_user_task": [], "retry": False, "signal": False}
        assert 'id="cancel"' not in page and "complete-task" not in page and "send-signal" not in page
        client, page = await offered("app")  # may complete user tasks and signal, not cancel
        assert client == {"cancel": False, "complete_user_task": ["approve"], "retry": False, "signal": True}
        assert 'id="cancel"' not in page and "complete-task" in page
        admin_acts, page = await offered("ops")
        assert admin_acts == {
            "cancel": True,
            "complete_user_task": ["approve"],
            "retry": False,
            "signal": True,
        }
        assert 'id="cancel"' in page
