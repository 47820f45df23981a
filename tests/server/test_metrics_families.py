"""Every /metrics family against the table in docs/metrics.md, both ways, on a real server.

A server with its HTTP port and a real worker runs instances through every path the step and
instance figures count: success, a retried step, a step that times out, a step whose lease runs
out, a failure, a local run, a schedule, a sub-workflow, a user task left waiting; then /metrics
is scraped and parsed: each family has the documented type and labels, no family is undocumented
and none documented is missing, label values are bounded (no instance id anywhere), and the
queue gauges read 0 for a queue with nothing in it. Then the log lines: one WARNING per final
failure, one INFO per operator action (docs/metrics.md#logs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pg import STORES, TEST_DATABASE_URL
from ports import free_port
from prometheus_client.parser import text_string_to_metric_families

import wiggle
from wiggle import ExecutionMode, RetryPolicy, Workflow
from wiggle import _tracing as wiggle_tracing
from wiggle._logging import JsonFormatter
from wiggle.testing import EmbeddedServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
STEP_OUTCOMES = {"completed", "retry", "failed", "timed_out", "lease_expired", "released"}
TICK_OUTCOMES = {"fired", "skipped", "buffered", "triggered"}
INSTANCE_ID = re.compile(r"wi-[0-9a-f]{12,}")

_calls: dict[str, int] = {}


def ok(ctx: dict) -> dict:
    return {**ctx, "ok": True}


def flaky(ctx: dict) -> dict:
    """Fails its first call, passes the second."""
    _calls["flaky"] = _calls.get("flaky", 0) + 1
    if _calls["flaky"] == 1:
        raise RuntimeError("first call fails")
    return ctx


def slowpoke(ctx: dict) -> dict:
    """Overruns its 1 s limit the first time."""
    _calls["slowpoke"] = _calls.get("slowpoke", 0) + 1
    if _calls["slowpoke"] == 1:
        time.sleep(2.5)
    return ctx


def doomed(ctx: dict) -> dict:
    raise ValueError("never works")


async def lingering(ctx: dict) -> dict:
    """Outlasts its worker's drain: cut and handed back."""
    _calls["lingering"] = _calls.get("lingering", 0) + 1
    await asyncio.sleep(60)
    return ctx


def parse_doc_table(path: Path = DOC) -> dict[str, tuple[str, frozenset[str], bool]]:
    """name -> (type, labels, PostgreSQL only) from the "## Families" table of docs/metrics.md."""
    text = path.read_text()
    section = text.split("## Families", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, frozenset[str], bool]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`wiggle_"):
            continue
        name = cells[0].strip("`")
        labels = frozenset(re.findall(r"`([a-z_]+)`", cells[2]))
        assert name not in rows, f"{name} documented twice"
        rows[name] = (cells[1], labels, "PostgreSQL only" in cells[3])
    assert len(rows) > 20, f"the families table of {path} was not found or is nearly empty"
    return rows


def scrape_families(body: str) -> dict[str, tuple[str, frozenset[str], list[Any]]]:
    """exposed name -> (type, label names, samples) from a Prometheus text exposition."""
    out: dict[str, tuple[str, frozenset[str], list[Any]]] = {}
    for family in text_string_to_metric_families(body):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        out[name] = (family.type, labels, list(family.samples))
    return out


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The value of one series (a histogram's by its sample name, e.g. ``..._count``)."""
    base = next((n for n in families if name == n or name.startswith(n + "_")), name)
    for sample in families[base][2]:
        if sample.name in (name, name.removesuffix("_total") + "_total") and sample.labels == labels:
            return float(sample.value)
    raise AssertionError(f"no {name}{labels} in /metrics")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return str(answer.read().decode())


async def until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"still not true after {timeout} s: {what}"
        await asyncio.sleep(0.05)


def flows(tag: str) -> dict[str, Any]:
    child = Workflow.define(f"fam-child-{tag}").step(ok, name="kid_step").build()
    return {
        "ok": Workflow.define(f"fam-ok-{tag}").step(ok).build(),
        "flaky": Workflow.define(f"fam-flaky-{tag}").step(flaky, retry=RetryPolicy.fixed(2, 0.01)).build(),
        "slow": Workflow.define(f"fam-slow-{tag}")
        .step(slowpoke, timeout=timedelta(seconds=1), retry=RetryPolicy.fixed(2, 0.01))
        .build(),
        "doomed": Workflow.define(f"fam-doomed-{tag}").step(doomed, retry=RetryPolicy.none()).build(),
        "local": Workflow.define(f"fam-local-{tag}")
        .execution(ExecutionMode.LOCAL_ASYNC)
        .step(ok)
        .step(ok, name="again")
        .build(),
        "child": child,
        "parent": Workflow.define(f"fam-parent-{tag}").sub_workflow("call", child, result_key="kid").build(),
        "ghost": Workflow.define(f"fam-ghost-{tag}")
        .step(ok, name="abandoned", retry=RetryPolicy.none())
        .build(),
        "wait": Workflow.define(f"fam-wait-{tag}").user_task("approve").step(ok).build(),
        "idle": Workflow.define(f"fam-idle-{tag}").step(ok, queue=f"idle-q-{tag}").build(),
        "cut": Workflow.define(f"fam-cut-{tag}").step(lingering).build(),
    }


async def drive(server: EmbeddedServer, f: dict[str, Any]) -> list[str]:
    """Run every path; the ids of the instances started by hand."""
    client = server.client
    for name in ("child", "ok", "flaky", "slow", "doomed", "local", "parent", "ghost", "wait", "idle", "cut"):
        await client.register(f[name])
    # a lease that runs out: claimed by a "worker" that never reports, its queue served by none
    ghost = (await client.start(f["ghost"], {})).instance_id
    claimed = await server.server.instances.claim("gone-worker", [f["ghost"].name], 1, lease_millis=1000)
    assert len(claimed) == 1
    ids = [ghost]
    workers = [f[n] for n in ("child", "ok", "flaky", "slow", "doomed", "local", "parent", "wait")]
    async with server.worker(workers):
        for name in ("ok", "flaky", "slow", "doomed", "local", "parent"):
            ids.append((await client.start(f[name], {})).instance_id)
        waiting = [(await client.start(f["wait"], {})).instance_id for _ in range(2)]
        ids += waiting
        await client.create_schedule(f"fam-sched-{f['ok'].name}", f["ok"], {}, every=1.0)
        finished = {}
        for instance_id in ids[1:7]:
            finished[instance_id] = (await client.wait(instance_id, timeout=30)).status
        assert (
            list(finished.values()) == ["COMPLETED", "COMPLETED", "COMPLETED", "FAILED"] + ["COMPLETED"] * 2
        )

        async def ticked() -> bool:
            page, _ = await client.list(workflow=f["ok"].name, status="COMPLETED")
            return any(i.schedule_id for i in page)

        await until(ticked, "a schedule tick's instance completed")
        await client.delete_schedule(f"fam-sched-{f['ok'].name}")
        await client.complete_user_task(waiting[0], "approve", {})
        assert (await client.wait(waiting[0], timeout=30)).status == "COMPLETED"
    assert (await client.wait(ghost, timeout=30)).status == "FAILED"  # its lease ran out, no retry
    # a SERVER-mode step cut by its worker's drain, handed back CUT (wiggle_step_handbacks_total)
    cut = (await client.start(f["cut"], {})).instance_id
    ids.append(cut)
    _calls.pop("lingering", None)
    cutter = server.worker([f["cut"]])
    await cutter.start()
    try:

        async def lingers() -> bool:
            return _calls.get("lingering", 0) == 1

        await until(lingers, "the step that outlasts the drain runs")
    finally:
        await cutter.close(timeout=0.1)
    await client.cancel(cut)
    with pytest.raises(Exception, match="does not exist"):
        await client.get("wi-00000000000000000000ffff")  # an RPC error
    return ids


@pytest.mark.parametrize("store", STORES)
async def test_every_family_is_documented_and_every_documented_family_exported(
    store: str,
    pg_schema: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A start under an active trace is a unary StartInstance call of its own; an earlier test of
    # this process that installed a TracerProvider would make it one here: the starts below go
    # as a process without one sends them (StartInstances messages of the client's stream).
    monkeypatch.setattr(wiggle_tracing, "active", lambda: False)
    documented = parse_doc_table()
    tag = store
    f = flows(tag)
    _calls.clear()
    port = free_port()
    settings: dict[str, Any] = {"http_port": port, "queue_lag_interval_millis": 100}
    if store == "postgres":
        settings |= {"database_url": TEST_DATABASE_URL, "database_schema": pg_schema}
    async with EmbeddedServer(**settings) as server:
        ids = await drive(server, f)
        wait_flow = f["wait"].name

        async def sampled() -> bool:
            body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            return f'wiggle_instances_running{{workflow="{wait_flow}"}} 1.0' in body

        await until(sampled, "the sampler saw the one instance left waiting")

        async def emptied() -> bool:
            # The queue gauges are the lag monitor's last look (every 100 ms here), the instance
            # counts the sampler's: a step of a last schedule tick that finished as the worker
            # stopped can still be in the one and no longer in the other.
            body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
            queue = f["ok"].name
            return all(
                f'{gauge}{{queue="{queue}"}} 0.0' in body
                for gauge in (
                    "wiggle_queue_ready_steps",
                    "wiggle_queue_running_steps",
                    "wiggle_queue_delayed_steps",
                )
            )

        await until(emptied, "the lag monitor saw the emptied queue empty")
        body = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
    exported = scrape_families(body)

    # both ways: nothing undocumented, nothing documented missing (the pool only on PostgreSQL)
    ours = {n for n in exported if n.startswith("wiggle_")}
    assert not ours - set(documented), f"exported, not in docs/metrics.md: {sorted(ours - set(documented))}"
    expected = {n for n, (_, _, pg_only) in documented.items() if store == "postgres" or not pg_only}
    assert not expected - ours, f"documented, not exported: {sorted(expected - ours)}"
    for name in sorted(expected):
        kind, labels, samples = exported[name]
        doc_kind, doc_labels, _ = documented[name]
        assert kind == doc_kind, f"{name}: exported as {kind}, documented as {doc_kind}"
        assert samples, f"{name}: no series after the run (the test should drive it)"
        assert labels == doc_labels, f"{name}: labels {sorted(labels)}, documented {sorted(doc_labels)}"

    # bounded label values: no instance id anywhere, outcomes and sources from their sets
    for name, (_, _, samples) in exported.items():
        for sample in samples:
            for key, val in sample.labels.items():
                assert not INSTANCE_ID.search(val) and val not in ids, f"{name}{sample.labels}: an id"
                if key == "outcome" and name.startswith("wiggle_step"):
                    assert val in STEP_OUTCOMES, (name, val)
                if key == "outcome" and name.startswith("wiggle_schedule"):
                    assert val in TICK_OUTCOMES, (name, val)
    # every path counted, by the outcome the history says
    attempts = "wiggle_step_attempts_total"
    assert value(exported, attempts, workflow=f["ok"].name, node="ok", outcome="completed") >= 2
    assert value(exported, attempts, workflow=f["flaky"].name, node="flaky", outcome="retry") == 1
    assert value(exported, attempts, workflow=f["flaky"].name, node="flaky", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["slow"].name, node="slowpoke", outcome="timed_out") == 1
    assert value(exported, attempts, workflow=f["slow"].name, node="slowpoke", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["doomed"].name, node="doomed", outcome="failed") == 1
    ghost = f["ghost"].name
    assert value(exported, attempts, workflow=ghost, node="abandoned", outcome="lease_expired") == 1
    assert value(exported, attempts, workflow=f["local"].name, node="again", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["child"].name, node="kid_step", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["parent"].name, node="call", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["wait"].name, node="approve", outcome="completed") == 1
    assert value(exported, attempts, workflow=f["cut"].name, node="lingering", outcome="released") == 1
    assert value(exported, "wiggle_step_handbacks_total", reason="CUT") == 1
    assert value(exported, "wiggle_step_retries_total", workflow=f["slow"].name, node="slowpoke") == 1
    assert value(exported, "wiggle_step_failures_total", workflow=ghost, node="abandoned") == 1
    duration = "wiggle_step_duration_seconds_count"
    assert value(exported, duration, workflow=f["flaky"].name, node="flaky", outcome="retry") == 1
    started = "wiggle_instances_started_total"
    assert value(exported, started, workflow=f["child"].name, source="sub_workflow") == 1
    assert value(exported, started, workflow=f["ok"].name, source="schedule") >= 1
    assert value(exported, started, workflow=f["wait"].name, source="client") == 2
    assert value(exported, "wiggle_schedule_ticks_total", workflow=f["ok"].name, outcome="fired") >= 1
    finished = "wiggle_instances_finished_total"
    assert value(exported, finished, workflow=f["doomed"].name, status="FAILED") == 1
    assert value(exported, "wiggle_instances_running", workflow=f["wait"].name) == 1
    assert value(exported, "wiggle_instances_running", workflow=f["ok"].name) == 0
    assert value(exported, "wiggle_rpc_duration_seconds_count", method="StartInstances") == len(ids)
    assert value(exported, "wiggle_rpc_errors_total", method="GetInstance") == 1
    (info,) = exported["wiggle_build_info"][2]
    assert info.value == 1 and info.labels["version"] == wiggle.__version__, info
    assert info.labels["impl"] in ("python", "cython")
    # queue gauges read 0 for a queue nobody used, and for one that emptied
    for queue in (f"idle-q-{tag}", f["ok"].name):
        for gauge in ("wiggle_queue_ready_steps", "wiggle_queue_running_steps", "wiggle_queue_delayed_steps"):
            assert value(exported, gauge, queue=queue) == 0, (gauge, queue)
    assert value(exported, "wiggle_queue_workers", queue=f"idle-q-{tag}") == 0
    assert value(exported, "wiggle_queue_workers", queue=f["ok"].name) == 1  # polled within 90 s
    if store == "postgres":
        assert (
            value(exported, "wiggle_db_pool_max_connections")
            >= value(exported, "wiggle_db_pool_connections")
            > 0
        )


# ---------------------------------------------------------------------------- the log lines


def _records(caplog: pytest.LogCaptureFixture, **fields: Any) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "wiggle.server" and all(getattr(r, k, None) == v for k, v in fields.items())
    ]


async def test_a_final_failure_and_every_operator_action_log_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="wiggle.server")
    doomed_flow = Workflow.define("log-doomed").step(doomed, retry=RetryPolicy.none()).build()
    waiting = Workflow.define("log-wait").user_task("approve").wait_signal("go").build()
    nested = Workflow.define("log-nested").sub_workflow("call", waiting).build()
    async with EmbeddedServer() as server:
        client = server.client
        await client.register(doomed_flow)
        await client.register(waiting)
        await client.register(nested)
        async with server.worker([doomed_flow]):
            failed = (await client.start(doomed_flow, {})).instance_id
            assert (await client.wait(failed, timeout=30)).status == "FAILED"
            (line,) = _records(caplog, instance_id=failed, levelname="WARNING")
            assert (line.workflow, line.node_id) == ("log-doomed", "doomed")
            assert "never works" in line.error and "failed for good" in line.getMessage()
            # the JSON format carries the fields (WIGGLE_LOG_FORMAT=json)
            as_json = json.loads(JsonFormatter().format(line))
            assert as_json["instance_id"] == failed and as_json["node_id"] == "doomed"
            assert "never works" in as_json["error"]

            await client.retry(failed, requested_by="alice")
            assert (await client.wait(failed, timeout=30)).status == "FAILED"
        (retried,) = _records(caplog, instance_id=failed, action="retried")
        assert retried.actor == "alice" and retried.levelname == "INFO"
        assert len(_records(caplog, instance_id=failed, levelname="WARNING")) == 2  # it failed again

        a = (await client.start(waiting, {})).instance_id
        b = (await client.start(waiting, {})).instance_id
        await client.complete_user_task(a, "approve", {})
        await client.signal(a, "go", {}, sender="billing-bot")
        await client.cancel(b, "not needed")
        await client.cancel(b, "again")  # refused: already cancelled, logged as such
        # the dashboard's cancel names its operator, recorded in the history and logged once
        c = (await client.start(waiting, {})).instance_id
        await server.server.instances.cancel(c, "from the dashboard", actor="ada (dashboard)")
        # a child the server cancels because its parent was cancelled is no operator action
        parent = (await client.start(nested, {})).instance_id
        for _ in range(400):
            kids, _ = await client.list(workflow=waiting.name, status="RUNNING")
            if kids:  # the child (a is completed, b and c cancelled)
                break
            await asyncio.sleep(0.05)
        (kid,) = kids
        await client.cancel(parent, "stop")
        assert (await client.wait(kid.instance_id, timeout=30)).status == "CANCELLED"
        await client.create_schedule("log-sched", waiting, {}, every=3600)
        await client.pause_schedule("log-sched")
        await client.trigger_schedule("log-sched")
        await client.delete_schedule("log-sched")
        b_history = await client.history(b)
        kid_history = await client.history(kid.instance_id)
    (completed,) = _records(caplog, instance_id=a, action="completed user task approve")
    assert completed.actor == "anonymous" and completed.workflow == "log-wait"
    (signalled,) = _records(caplog, instance_id=a, action="signal go delivered")
    assert signalled.actor == "billing-bot"
    cancels = [r.action for r in _records(caplog, instance_id=b)]
    assert cancels == ["cancelled", "cancel refused: already CANCELLED"], cancels
    (dashboard,) = _records(caplog, instance_id=c)
    assert (dashboard.actor, dashboard.action) == ("ada (dashboard)", "cancelled")
    assert [r.action for r in _records(caplog, instance_id=parent)] == ["cancelled"]
    assert not _records(caplog, instance_id=kid.instance_id), "the server's own cancel was logged"
    # every operator's cancel is in the history too (the refused one adds nothing), not the server's
    ops = [(e.kind, e.outcome, e.worker_id, e.error) for e in b_history if e.kind == "OPERATOR"]
    assert ops == [("OPERATOR", "CANCELLED", "anonymous", "not needed")], ops
    assert not [e for e in kid_history if e.kind == "OPERATOR"], kid_history
    schedule_actions = [r.action for r in _records(caplog) if "schedule log-sched" in r.getMessage()]
    assert schedule_actions == ["created", "paused", "triggered", "deleted"], schedule_actions
    # a trigger's line names the workflow and the instance it started, as fields (JSON logs)
    (triggered,) = _records(caplog, action="triggered")
    assert triggered.workflow == "log-wait" and triggered.instance_id.startswith("wi-"), vars(triggered)
    assert f"started instance {triggered.instance_id}" in triggered.getMessage()
    assert all(r.levelname == "INFO" for r in _records(caplog) if getattr(r, "actor", None))


async def test_an_instance_ended_as_failed_without_a_failing_step_names_its_last_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``end(success=False)`` fails an instance with no step failing: the line said "at node (none)"."""
    caplog.set_level(logging.INFO, logger="wiggle.server")
    flow = Workflow.define("log-rejected").end("rejected by policy", success=False).build()
    async with EmbeddedServer() as server:
        await server.client.register(flow)
        failed = (await server.client.start(flow, {})).instance_id
        assert (await server.client.wait(failed, timeout=30)).status == "FAILED"
    (line,) = _records(caplog, instance_id=failed, levelname="WARNING")
    assert "(none)" not in line.getMessage() and line.node_id, line.getMessage()
