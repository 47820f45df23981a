"""A claim whose COMMIT's answer was lost delivers what it committed (store.py ``claim``).

An outside trial cut the servers' PostgreSQL sessions under load (``pg_terminate_backend``, as a
database restart does): a claim whose session was cut after the server had run its COMMIT failed
with "cannot exit pipeline mode while busy", was run again as if nothing had committed, and the
steps its first run had leased to the worker were delivered to nobody. Each waited out its lease,
then failed "lease expired (worker unreachable)", spending an attempt: with one attempt, the
instance FAILED although its handler never ran. Now the claim asks PostgreSQL whether the lost
transaction committed (``pg_xact_status``) and, if it did, hands its steps to the worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from pg import TEST_DATABASE_URL

from wiggle import RetryPolicy, Workflow
from wiggle._storage.postgres import claims as claims_module
from wiggle.testing import EmbeddedServer

pytestmark = pytest.mark.postgres

ran: list[str] = []


def once(ctx: dict[str, Any]) -> dict[str, Any]:
    ran.append(str(ctx.get("n")))
    return {**ctx, "done": True}


FLOW = Workflow.define("lost-claim").step(once, retry=RetryPolicy.fixed(1, 0.01)).build()

#: The lease: far longer than the test waits, so a step redelivered only at its expiry fails it.
LEASE_MILLIS = 60_000


def cut_after_commit(monkeypatch: pytest.MonkeyPatch, wait: bool) -> list[int]:
    """Cut the session of the first claim that takes a step right after the server has run its
    COMMIT, before its answer is read (the pids cut are returned). ``wait``: until the session
    has ended (the connection is broken when the claim reads its answer); else at once, as the
    trial did (the claim reads the server's FATAL message and its pipeline cannot be exited:
    "cannot exit pipeline mode while busy")."""
    real_transaction = claims_module.transaction
    real_candidates = claims_module.claim_candidates
    took: dict[int, bool] = {}
    cut: list[int] = []

    async def candidates(conn: Any, *args: Any, **kwargs: Any) -> Any:
        rows, tokens = await real_candidates(conn, *args, **kwargs)
        took[id(conn)] = bool(rows)
        return rows, tokens

    @contextlib.asynccontextmanager
    async def transaction(conn: Any) -> AsyncIterator[Any]:
        real_execute = conn.execute

        async def execute(query: Any, *args: Any, **kwargs: Any) -> Any:
            cur = await real_execute(query, *args, **kwargs)
            if query == "COMMIT" and took.get(id(conn)) and not cut:
                pid = conn.info.backend_pid
                cut.append(pid)
                conn.pgconn.flush()  # the COMMIT reaches the server, which runs it
                async with await psycopg.AsyncConnection.connect(TEST_DATABASE_URL, autocommit=True) as admin:
                    await admin.execute("SELECT pg_sleep(0.2)")
                    timeout = 5000 if wait else 0
                    await admin.execute("SELECT pg_terminate_backend(%s, %s)", (pid, timeout))
            return cur

        conn.execute = execute
        took.pop(id(conn), None)
        try:
            async with real_transaction(conn) as pipeline:
                yield pipeline
        finally:
            del conn.execute

    monkeypatch.setattr(claims_module, "claim_candidates", candidates)
    monkeypatch.setattr(claims_module, "transaction", transaction)
    return cut


@pytest.mark.parametrize("wait", [False, True], ids=["cut-at-once", "cut-and-gone"])
async def test_a_step_whose_claims_answer_was_lost_runs_at_once_attempt_unspent(
    pg_schema: str, monkeypatch: pytest.MonkeyPatch, wait: bool
) -> None:
    ran.clear()
    async with EmbeddedServer(
        database_url=TEST_DATABASE_URL, database_schema=pg_schema, lease_millis=LEASE_MILLIS
    ) as server:
        await server.client.register(FLOW)
        info = await server.client.start(FLOW, {"n": 1})
        cut = cut_after_commit(monkeypatch, wait)
        async with server.worker([FLOW]):
            done = await server.client.wait(info.instance_id, timeout=15)
        monkeypatch.undo()
        history = await server.client.history(info.instance_id)
    assert len(cut) == 1, cut  # the claim's session was cut after its COMMIT
    # its one attempt was not spent on a lease expiry: the handler ran, once, and the step completed
    assert done.status == "COMPLETED", (done.status, [(e.outcome, e.error) for e in history])
    assert ran == ["1"]
    assert not [e for e in history if "lease expired" in (e.error or "")]
    steps = [(e.outcome, e.attempt) for e in history if e.node_id == "once"]
    assert steps == [("COMPLETED", 1)], [(e.node_id, e.outcome, e.error) for e in history]
