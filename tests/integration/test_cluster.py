"""Clustering over PostgreSQL with real processes: several ``wiggle server`` processes on one
database and schema, worker processes spread across them, and crashes of every part.

- three servers share 500 instances (fork/join, a 200 ms timer, a step that fails once): every
  instance COMPLETES once with the right context, every timer fires once, no step runs in two
  places at once;
- kill -9 of the clock leader while timers are pending: another node takes the duty over;
- SIGSTOP of the clock leader: another node takes the duty over once PostgreSQL ends the silent
  leader's session, and the old leader, continued, lets it be;
- SIGSTOP of a worker's server: the worker moves to its next server at the channel's keepalive,
  before its steps' leases run out;
- kill -9 of a server mid-load, then a restart on its port: nothing acknowledged is lost and its
  worker reconnects by itself;
- kill -9 of a server under clients' idle start streams, then a restart on its port: their next
  starts go through;
- a PostgreSQL restart mid-load: calls fail UNAVAILABLE meanwhile (CLI exit 5), then all completes;
- ``wiggle server`` creates a fresh schema, ``wiggle migrate`` is idempotent, and
  ``wiggle server --processes 2`` serves one port from two processes.

Every test runs in its own schema (tests/pg.py), so two runs at once never collide; PostgreSQL
being unreachable fails these tests, never skips them. Handlers run in worker processes
(tests/integration/cluster_workers/) and record each execution and each acknowledged report to files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from db_proxy import DatabaseProxy
from pg import TEST_DATABASE_URL, PrivatePostgres, drop_schema, new_schema_name, temp_schema
from ports import free_port
from psycopg import sql

from wiggle import AsyncClient, Client
from wiggle import _tracing as wiggle_tracing
from wiggle._server.config import SETTINGS
from wiggle._storage.postgres import migration_files
from wiggle._storage.postgres.migrations import lock_key
from wiggle.errors import Unavailable

HELPERS = Path(__file__).resolve().parent / "cluster_workers"
sys.path.insert(0, str(HELPERS))

import cluster_flows  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_script = Path(sys.executable).with_name("wiggle")
WIGGLE = [str(_script)] if _script.exists() else [sys.executable, "-m", "wiggle.cli"]
FINISHED = ("COMPLETED", "FAILED", "CANCELLED")
LISTENING = re.compile(r"wiggle server listening on ([\d.]+):(\d+)")


# ---------------------------------------------------------------------------- database helpers


#: The server of each schema a cluster runs on that is not on the shared one (cluster_in).
DATABASES: dict[str, str] = {}


def url_of(schema: str) -> str:
    """The PostgreSQL server ``schema`` is on."""
    return DATABASES.get(schema, TEST_DATABASE_URL)


def query(schema: str, text: str, params: Any = ()) -> list[Any]:
    """Rows of one statement; ``{s}`` in ``text`` is the quoted schema."""
    with psycopg.connect(url_of(schema), autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params).fetchall()


def status_counts(schema: str, workflow: str) -> Counter[str]:
    rows = query(
        schema, "SELECT status, count(*) FROM {s}.instances WHERE workflow = %s GROUP BY status", (workflow,)
    )
    return Counter({status: n for status, n in rows})


def schema_exists(schema: str) -> bool:
    return bool(query(schema, "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)))


def clock_lock_ports(schema: str) -> list[int]:
    """Client ports of the PostgreSQL sessions holding the clock-duty advisory lock of ``schema``."""
    key = lock_key("clock", schema) & 0xFFFF_FFFF_FFFF_FFFF
    rows = query(
        schema,
        "SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = %s AND l.objid::bigint = %s "
        "AND l.objsubid = 1",
        (key >> 32, key & 0xFFFF_FFFF),
    )
    return [r[0] for r in rows if r[0] is not None]


# ---------------------------------------------------------------------------- processes


def server_env(schema: str, **settings: str) -> dict[str, str]:
    """This process's environment minus every WIGGLE_* server setting, plus ``settings``."""
    ours = {var for _, var, _ in SETTINGS}
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env.update(
        WIGGLE_HOST="127.0.0.1",
        WIGGLE_DATABASE_URL=url_of(schema),
        WIGGLE_DATABASE_SCHEMA=schema,
        WIGGLE_POOL_SIZE="6",  # 3 servers x (6 + listener + leader) stays far below max_connections
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)
    return env


class Server:
    """One ``wiggle server`` process."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name, self.proc, self.log = name, proc, log
        self.port = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Cluster:
    """Server and worker processes of one test, all killed (by pid) when it ends."""

    def __init__(self, directory: Path, schema: str, **settings: str) -> None:
        self.dir = directory
        self.schema = schema
        self.settings = settings
        self.servers: dict[str, Server] = {}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()  # pids this test killed on purpose
        self.procs: list[subprocess.Popen[bytes]] = []
        self._starts = Counter[str]()

    # -------------------------------------------------------------- servers

    def spawn_server(self, name: str, port: int = 0, **settings: str) -> Server:
        """A server process (``settings``: WIGGLE_* variables of its own, over the cluster's)."""
        self._starts[name] += 1
        log = self.dir / f"server-{name}-{self._starts[name]}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*WIGGLE, "server", "--port", str(port)],
                env=server_env(self.schema, **{**self.settings, **settings}),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        server = Server(name, proc, log)
        self.servers[name] = server
        return server

    async def ready(self, server: Server, timeout: float = 60.0) -> Server:
        deadline = time.monotonic() + timeout
        while True:
            match = LISTENING.search(server.text())
            if match:
                server.port = int(match.group(2))
                return server
            if server.proc.poll() is not None:
                raise AssertionError(
                    f"server {server.name} exited with {server.proc.returncode}\n{self.logs()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"server {server.name} not listening after {timeout} s\n{self.logs()}")
            await asyncio.sleep(0.05)

    async def start_servers(self, names: Iterable[str]) -> list[Server]:
        spawned = [self.spawn_server(n) for n in names]
        return [await self.ready(s) for s in spawned]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        self.killed.add(proc.pid)
        proc.kill()
        proc.wait(10)

    # -------------------------------------------------------------- workers

    def start_worker(
        self,
        name: str,
        server: Server,
        flows: Iterable[str] = (cluster_flows.MIXED,),
        transport: str = "stream",
        also: Iterable[Server] = (),
    ) -> subprocess.Popen[bytes]:
        """A worker process on ``server``, falling over to the servers ``also`` in order."""
        with open(self.dir / f"worker-{name}.log", "wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(HELPERS / "cluster_worker.py"),
                    ",".join(s.target for s in (server, *also)),
                    str(self.dir),
                    "--worker-id",
                    name,
                    "--flows",
                    ",".join(flows),
                    "--transport",
                    transport,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        self.workers[name] = proc
        return proc

    # -------------------------------------------------------------- waiting and diagnostics

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.pid not in self.killed and proc.poll() is not None:
                raise AssertionError(f"process {proc.args!r} exited with {proc.returncode}\n{self.logs()}")

    def logs(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.dir.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def stuck(self, workflow: str) -> str:
        rows = query(
            self.schema,
            "SELECT t.node_id, t.status, t.attempt, count(*) FROM {s}.tokens t JOIN {s}.instances i "
            "ON i.id = t.instance_id WHERE i.workflow = %s AND t.status IN ('READY', 'RUNNING', 'WAITING', "
            "'AWAITING', 'JOINED') GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 20",
            (workflow,),
        )
        return "active tokens (node, status, attempt, count): " + repr(rows)

    async def wait_finished(
        self, workflow: str, count: int, timeout: float, check_alive: bool = True
    ) -> None:
        """Until ``count`` instances of ``workflow`` are finished (COMPLETED, FAILED or CANCELLED)."""
        deadline = time.monotonic() + timeout
        while True:
            counts = status_counts(self.schema, workflow)
            if sum(counts[s] for s in FINISHED) >= count:
                return
            if check_alive:
                self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after {timeout} s: {dict(counts)} of {count}\n{self.stuck(workflow)}\n{self.logs()}"
                )
            await asyncio.sleep(0.25)

    async def wait_completed_share(self, workflow: str, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while status_counts(self.schema, workflow)["COMPLETED"] < count:
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {count} COMPLETED after {timeout} s\n{self.logs()}")
            await asyncio.sleep(0.1)

    def clock_leaders(self) -> list[Server]:
        """The live servers holding the clock-duty lock, found by who owns the session's socket."""
        ports = set(clock_lock_ports(self.schema))
        owners = []
        for server in self.servers.values():
            if server.proc.poll() is None:
                inodes = _socket_inodes(server.proc.pid)
                if any(_sockets(port).keys() & inodes for port in ports):
                    owners.append(server)
        return owners

    async def wait_leader(self, exclude: Iterable[Server] = (), timeout: float = 20.0) -> Server:
        """The one server running the clock duties (other than ``exclude``)."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = self.clock_leaders()
            assert len(leaders) <= 1, f"two clock leaders at once: {[s.name for s in leaders]}"
            if leaders and leaders[0] not in exclude:
                return leaders[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no clock leader after {timeout} s\n{self.logs()}")
            await asyncio.sleep(0.1)

    # -------------------------------------------------------------- teardown

    def stop(self) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        for proc in alive:
            proc.terminate()
        for proc in alive:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """``proc`` stopped with SIGSTOP (frozen: its sockets open, nothing answering) until the end
    of the block, then continued."""
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def cluster_in(tmp_path: Path, database_url: str = TEST_DATABASE_URL, **settings: str) -> Iterator[Cluster]:
    with temp_schema(database_url) as schema:
        DATABASES[schema] = database_url
        cluster = Cluster(tmp_path, schema, **settings)
        try:
            yield cluster
        finally:
            cluster.stop()
            del DATABASES[schema]


async def start_instances(
    clients: list[AsyncClient],
    workflow: str,
    numbers: Iterable[int],
    in_flight: int = 32,
    request_ids: bool = False,
) -> dict[str, int]:
    """Start one instance per number, round-robin over ``clients``; instance id -> number.
    ``request_ids``: each start has one (a start that failed UNAVAILABLE is made again)."""
    gate = asyncio.Semaphore(in_flight)

    async def one(k: int, n: int) -> tuple[str, int]:
        async with gate:
            rid = f"{workflow}-{n}" if request_ids else ""
            info = await clients[k % len(clients)].start(workflow, {"n": n}, request_id=rid)
            return info.instance_id, n

    started = await asyncio.gather(*(one(k, n) for k, n in enumerate(numbers)))
    ids = dict(started)
    assert len(ids) == len(started), "two starts returned the same instance id"
    return ids


async def timed(call: Awaitable[Any]) -> tuple[BaseException | None, float]:
    """(the exception ``call`` raised or None, seconds it took)."""
    started = time.monotonic()
    try:
        await call
    except Exception as exc:
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


async def close_all(clients: Iterable[AsyncClient]) -> None:
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


# ---------------------------------------------------------------------------- verification


def history_of(schema: str, ids: Iterable[str]) -> list[tuple[Any, ...]]:
    return query(
        schema,
        "SELECT instance_id, node_id, attempt, outcome, worker_id, started_at, ended_at, error FROM {s}.history_entries "
        "WHERE instance_id = ANY(%s) ORDER BY seq, pos",
        (list(ids),),
    )


def verify(
    cluster: Cluster,
    ids: dict[str, int],
    contexts: dict[str, dict[str, Any]],
    expected_context: Any,
    runs_when_clean: dict[str, int],
    sleep_node: str,
    exact: bool,
) -> dict[str, int]:
    """Everything the cluster promises, over every instance in ``ids``.

    ``exact``: nothing crashed, so every step ran exactly as often as designed (the flaky step
    twice, the others once). Otherwise re-runs are allowed (at-least-once), but never a second
    completion, never an acknowledged report missing from the history, never two runs at once.
    A step whose claim committed but never reached its worker (the answer was lost in the crash)
    runs only after its lease expires, so it may show one run fewer than designed. Returns
    counts for the test's report line.
    """
    problems: list[str] = []
    # instances: COMPLETED, exactly the expected context
    for instance_id, n in ids.items():
        context = contexts.get(instance_id)
        if context is None:
            problems.append(f"{instance_id}: not listed as COMPLETED")
        elif context != expected_context(n):
            problems.append(f"{instance_id}: context {context} != {expected_context(n)}")

    # history: one END, one SLEPT at the sleep node, one COMPLETED per worker node, one designed RETRY
    entries: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    completed_at: set[tuple[str, str, int]] = set()
    retried_at: set[tuple[str, str, int]] = set()
    lease_expiries = 0
    for row in history_of(cluster.schema, ids):
        lease_expiries += row[3] == "RETRY" and "lease expired" in row[7]
        entries[row[0]].append(row)
        if row[3] == "COMPLETED":
            completed_at.add((row[0], row[1], row[2]))
        elif row[3] == "RETRY":
            retried_at.add((row[0], row[1], row[2]))
    for instance_id in ids:
        outcomes = Counter((node, outcome) for _, node, _, outcome, *_ in entries[instance_id])
        if sum(v for (_, o), v in outcomes.items() if o == "END") != 1:
            problems.append(f"{instance_id}: END recorded {outcomes} times")
        if outcomes[(sleep_node, "SLEPT")] != 1:
            problems.append(
                f"{instance_id}: timer {sleep_node!r} fired {outcomes[(sleep_node, 'SLEPT')]} times"
            )
        for node in runs_when_clean:
            if outcomes[(node, "COMPLETED")] != 1:
                problems.append(f"{instance_id}: {node} COMPLETED {outcomes[(node, 'COMPLETED')]} times")
        if "flaky" in runs_when_clean and (instance_id, "flaky", 1) not in retried_at:
            problems.append(f"{instance_id}: the designed failure of flaky attempt 1 is not in the history")
        if exact:
            retries = [(n, a) for _, n, a, o, *_ in entries[instance_id] if o == "RETRY"]
            designed = [("flaky", 1)] if "flaky" in runs_when_clean else []
            if retries != designed:
                problems.append(f"{instance_id}: retries {retries}, designed {designed}")

    # executions: never two runs of one (instance, node) at once; each completion was really run
    runs, acks = cluster_flows.read_records(cluster.dir)
    by_step: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        if run["i"] in ids:
            by_step[(run["i"], run["n"])].append(run)
    ran_ok = {(r["i"], r["n"], r["a"]) for r in runs if r["ok"]}
    for (instance_id, node), step_runs in by_step.items():
        step_runs.sort(key=lambda r: r["t0"])
        for before, after in zip(step_runs, step_runs[1:], strict=False):
            if after["t0"] < before["t1"]:
                problems.append(f"{instance_id} {node}: ran concurrently on {before['w']} and {after['w']}")
    for key in completed_at:
        if key[1] in runs_when_clean and key not in ran_ok:
            problems.append(f"{key}: COMPLETED in the history but no worker ran it successfully")
    for instance_id in ids:
        for node, times in runs_when_clean.items():
            step_runs = by_step.get((instance_id, node), [])
            if exact and len(step_runs) != times:
                problems.append(f"{instance_id} {node}: ran {len(step_runs)} times, designed {times}")
            if not step_runs:
                problems.append(f"{instance_id} {node}: never ran")

    # acknowledged reports: each is in the history (a lost acknowledged completion shows here)
    for ack in acks:
        key = (ack["i"], ack["n"], ack["a"])
        if ack["i"] not in ids:
            continue
        wanted = completed_at if ack["ack"] == "CompleteTask" else retried_at
        if key not in wanted:
            problems.append(f"{key}: {ack['ack']} was acknowledged to {ack['w']} but is not in the history")
    if exact:
        acked = Counter(a["ack"] for a in acks if a["i"] in ids)
        reports = Counter({"CompleteTask": sum(runs_when_clean.values()) * len(ids)})
        if "flaky" in runs_when_clean:
            reports["CompleteTask"] -= len(ids)
            reports["FailTask"] = len(ids)
        if acked != reports:
            problems.append(f"acknowledged reports {dict(acked)}, designed {dict(reports)}")

    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:25])
    designed_runs = sum(runs_when_clean.values()) * len(ids)
    return {
        "runs": sum(len(r) for r in by_step.values()),
        "extra_runs": sum(len(r) for r in by_step.values()) - designed_runs,
        "acks": sum(1 for a in acks if a["i"] in ids),
        "lease_expiries": lease_expiries,
    }


async def completed_contexts(client: AsyncClient, workflow: str) -> dict[str, dict[str, Any]]:
    """instance id -> context of every COMPLETED instance of ``workflow``, paged through the API."""
    out: dict[str, dict[str, Any]] = {}
    token = ""
    while True:
        page, token = await client.list(
            workflow=workflow, status="COMPLETED", page_size=1000, page_token=token
        )
        out.update((i.instance_id, i.context) for i in page)
        if not token:
            return out


async def verify_moved_on(cluster: Cluster, client: AsyncClient, ids: dict[str, int]) -> dict[str, int]:
    """``verify`` of the mixed flow after a worker moved to another server (re-runs allowed),
    and no step that ran waited out its lease: the steps the worker held were reported to the
    server it moved to. Returns verify's counts."""
    contexts = await completed_contexts(client, cluster_flows.MIXED)
    stats = verify(
        cluster,
        ids,
        contexts,
        cluster_flows.mixed_expected,
        {"prepare": 1, "left": 1, "right": 1, "flaky": 2, "finish": 1},
        "nap",
        exact=False,
    )
    runs, _ = cluster_flows.read_records(cluster.dir)
    ran = {(r["i"], r["n"], r["a"]) for r in runs}
    expired_after_running = [
        (instance_id, node, attempt)
        for instance_id, node, attempt, outcome, *_, error in history_of(cluster.schema, ids)
        if outcome == "RETRY" and "lease expired" in error and (instance_id, node, attempt) in ran
    ]
    assert not expired_after_running, f"{expired_after_running} {stats}\n{cluster.logs()}"
    return stats


# ---------------------------------------------------------------------------- 1. the cluster


@pytest.mark.timeout(150)
async def test_three_servers_run_500_instances_exactly_once(tmp_path: Path) -> None:
    n_instances = 500
    with cluster_in(tmp_path) as cluster:
        servers = await cluster.start_servers(["a", "b", "c"])
        # one worker per server; the middle one on unary RPCs, the others on the worker stream
        for server, transport in zip(servers, ["stream", "unary", "stream"], strict=True):
            cluster.start_worker(f"w-{server.name}", server, transport=transport)
        clients = [AsyncClient(s.target) for s in servers]
        leader = await cluster.wait_leader()
        samples: list[list[Server]] = []

        async def sample_leaders() -> None:
            while True:
                samples.append(cluster.clock_leaders())
                await asyncio.sleep(0.5)

        sampler = asyncio.ensure_future(sample_leaders())
        try:
            await clients[0].register(cluster_flows.mixed_flow())
            started = time.monotonic()
            ids = await start_instances(clients, cluster_flows.MIXED, range(n_instances))
            await cluster.wait_finished(cluster_flows.MIXED, n_instances, timeout=110)
            elapsed = time.monotonic() - started
            # every server sees every instance COMPLETED
            views = [await completed_contexts(c, cluster_flows.MIXED) for c in clients]
            for server, view in zip(servers, views, strict=True):
                assert set(view) == set(ids), f"server {server.name} lists {len(view)} COMPLETED"
            verify(
                cluster,
                ids,
                views[1],
                cluster_flows.mixed_expected,
                cluster_flows.MIXED_RUNS,
                "nap",
                exact=True,
            )
            # the work was spread: each worker (so each server) handed out and reported steps
            runs, _ = cluster_flows.read_records(cluster.dir)
            per_worker = Counter(r["w"] for r in runs)
            assert set(per_worker) == {f"w-{s.name}" for s in servers}, per_worker
            # exactly one node ran the clock duties, the same one the whole time
            sampler.cancel()
            assert {tuple(s.name for s in sample) for sample in samples} == {(leader.name,)}, samples
            print(f"{n_instances} instances in {elapsed:.1f} s; steps per worker {dict(per_worker)}")
        finally:
            sampler.cancel()
            await close_all(clients)


# ---------------------------------------------------------------------------- 2. crashes


async def parked_all_fired(cluster: Cluster, client: AsyncClient, ids: dict[str, int]) -> None:
    """Every parked instance of ``ids`` finished COMPLETED, its timer fired once, its step run once."""
    await cluster.wait_finished(cluster_flows.PARKED, len(ids), timeout=40)
    contexts = await completed_contexts(client, cluster_flows.PARKED)
    verify(cluster, ids, contexts, lambda n: {"n": n, "after": True}, {"after": 1}, "park", exact=True)


@pytest.mark.timeout(90)
async def test_kill_clock_leader_while_timers_pending(tmp_path: Path) -> None:
    n_instances = 120
    with cluster_in(tmp_path, WIGGLE_LEASE_MILLIS="8000") as cluster:
        servers = await cluster.start_servers(["a", "b", "c"])
        leader = await cluster.wait_leader()
        survivors = [s for s in servers if s is not leader]
        for server in survivors:
            cluster.start_worker(f"w-{server.name}", server, flows=[cluster_flows.PARKED])
        clients = [AsyncClient(s.target) for s in servers]
        try:
            await clients[0].register(cluster_flows.parked_flow())
            ids = await start_instances(clients, cluster_flows.PARKED, range(n_instances))
            waiting = query(
                cluster.schema,
                "SELECT count(*) FROM {s}.tokens WHERE status = 'WAITING' AND node_id = 'park'",
            )[0][0]
            (slept,) = query(
                cluster.schema, "SELECT count(*) FROM {s}.history_entries WHERE outcome = 'SLEPT'"
            )[0]
            assert (waiting, slept) == (n_instances, 0), "the timers must still be pending at the kill"
            cluster.kill(leader.proc)
            killed_at_ms = int(time.time() * 1000)
            successor = await cluster.wait_leader(exclude=[leader], timeout=15)
            assert successor in survivors
            takeover = time.time() - killed_at_ms / 1000
            await parked_all_fired(cluster, clients[servers.index(survivors[0])], ids)
            # never early, and fired by a survivor (every timer was due after the kill)
            created = dict(
                query(
                    cluster.schema,
                    "SELECT id, created_at FROM {s}.instances WHERE id = ANY(%s)",
                    (list(ids),),
                )
            )
            for instance_id, _node, _, outcome, _, _, ended_at, _ in history_of(cluster.schema, ids):
                if outcome == "SLEPT":
                    assert ended_at >= created[instance_id] + int(cluster_flows.PARK_SECONDS * 1000)
                    assert ended_at >= killed_at_ms - 50
            print(f"clock duty taken over by {successor.name} within {takeover:.1f} s of the kill")
        finally:
            await close_all(clients)


@pytest.mark.timeout(90)
async def test_frozen_clock_leader_loses_the_duties(tmp_path: Path) -> None:
    """A leader stopped with SIGSTOP keeps its sockets open: PostgreSQL ends its silent session
    after WIGGLE_STALL_TIMEOUT_MILLIS and the other server fires the timers; the old leader,
    continued, says it lost the duties and does not take them back while the other holds them."""
    n_instances = 40
    with cluster_in(tmp_path, WIGGLE_LEASE_MILLIS="8000", WIGGLE_STALL_TIMEOUT_MILLIS="2000") as cluster:
        servers = await cluster.start_servers(["a", "b"])
        leader = await cluster.wait_leader()
        (survivor,) = [s for s in servers if s is not leader]
        cluster.start_worker(f"w-{survivor.name}", survivor, flows=[cluster_flows.PARKED])
        client = AsyncClient(survivor.target)
        try:
            await client.register(cluster_flows.parked_flow())
            ids = await start_instances([client], cluster_flows.PARKED, range(n_instances))
            with stopped(leader.proc):
                stopped_at = time.monotonic()
                successor = await cluster.wait_leader(exclude=[leader], timeout=15)
                assert successor is survivor
                takeover = time.monotonic() - stopped_at
                await parked_all_fired(cluster, client, ids)
            deadline = time.monotonic() + 15
            while "lost the clock duties" not in leader.text():
                assert time.monotonic() < deadline, f"the old leader never noticed\n{cluster.logs()}"
                await asyncio.sleep(0.1)
            for _ in range(20):  # and it does not take them back (wait_leader: never two at once)
                assert await cluster.wait_leader() is survivor
                await asyncio.sleep(0.1)
            cluster.check_alive()
            print(f"clock duty taken over by {survivor.name} {takeover:.1f} s after the leader froze")
        finally:
            await client.close()


@pytest.mark.timeout(120)
async def test_frozen_server_its_worker_moves_on(tmp_path: Path) -> None:
    """A worker whose server is stopped with SIGSTOP (its sockets stay open, nothing answers)
    moves to the next server it was given within the channel's keepalive (~15 s), not at its
    poll's timeout, and its steps in flight are reported there before their leases expire."""
    n_instances = 120
    with cluster_in(tmp_path) as cluster:
        servers = await cluster.start_servers(["a", "b"])
        leader = await cluster.wait_leader()
        (victim,) = [s for s in servers if s is not leader]
        cluster.start_worker("w", victim, also=[leader])
        client = AsyncClient(leader.target)
        try:
            await client.register(cluster_flows.mixed_flow())
            ids = await start_instances([client], cluster_flows.MIXED, range(n_instances))
            await cluster.wait_completed_share(cluster_flows.MIXED, n_instances // 4)
            with stopped(victim.proc):
                stopped_at = time.monotonic()
                await cluster.wait_finished(cluster_flows.MIXED, n_instances, timeout=60)
            took = time.monotonic() - stopped_at
            # Only a claim the frozen server committed and never answered waits out its lease
            # (docs/failover.md): the steps the worker held were reported to the other server.
            stats = await verify_moved_on(cluster, client, ids)
            print(f"all finished {took:.1f} s after the freeze; {stats}")
        finally:
            await client.close()


async def test_server_cut_from_its_database_sends_its_clients_on(tmp_path: Path) -> None:
    """A server that loses its database (a network partition between the two; the process lives,
    its port answers) while another server of the cluster keeps it: the worker and the client
    given both addresses carry on through the other server, every instance finishes, and no step
    the worker ran waits out its lease."""
    n_instances = 120
    async with DatabaseProxy(5432) as proxy:
        with cluster_in(tmp_path) as cluster:
            cut = cluster.spawn_server(
                "cut", WIGGLE_DATABASE_URL=TEST_DATABASE_URL.replace(":5432/", f":{proxy.port}/")
            )
            kept = cluster.spawn_server("kept")
            await cluster.ready(cut)
            await cluster.ready(kept)
            cluster.start_worker("w", cut, also=[kept])
            client = AsyncClient([cut.target, kept.target])
            try:
                await client.register(cluster_flows.mixed_flow())
                ids = await start_instances([client], cluster_flows.MIXED, range(n_instances))
                await cluster.wait_completed_share(cluster_flows.MIXED, n_instances // 4)
                proxy.down()
                cut_at = time.monotonic()
                # with request ids: a start the cut server was committing as its connection died
                # may or may not have been applied, and only a request id makes a repeat safe
                later = range(n_instances, n_instances + 40)
                more = await asyncio.wait_for(
                    start_instances([client], cluster_flows.MIXED, later, request_ids=True), 40
                )
                ids.update(more)
                await cluster.wait_finished(cluster_flows.MIXED, len(ids), timeout=90)
                took = time.monotonic() - cut_at
                stats = await verify_moved_on(cluster, client, ids)
                print(f"all finished {took:.1f} s after the cut; {stats}")
            finally:
                await client.close()


@pytest.mark.timeout(120)
async def test_kill_server_mid_load_and_restart(tmp_path: Path) -> None:
    n_instances = 300
    with cluster_in(tmp_path, WIGGLE_LEASE_MILLIS="8000") as cluster:
        servers = await cluster.start_servers(["a", "b", "c"])
        victim = servers[1]
        for server in servers:
            flows = [cluster_flows.MIXED] + ([cluster_flows.PROBE] if server is victim else [])
            cluster.start_worker(f"w-{server.name}", server, flows=flows)
        clients = [AsyncClient(s.target) for s in servers]
        try:
            await clients[0].register(cluster_flows.mixed_flow())
            await clients[0].register(cluster_flows.probe_flow())
            ids = await start_instances(clients, cluster_flows.MIXED, range(n_instances))
            await cluster.wait_completed_share(cluster_flows.MIXED, n_instances // 4)
            cluster.kill(victim.proc)
            killed_at = time.monotonic()
            await asyncio.sleep(1.0)
            restarted = await cluster.ready(cluster.spawn_server(victim.name, port=victim.port))
            assert restarted.port == victim.port
            await cluster.wait_finished(cluster_flows.MIXED, n_instances, timeout=75)
            recovered = time.monotonic() - killed_at
            contexts = await completed_contexts(clients[0], cluster_flows.MIXED)
            stats = verify(
                cluster,
                ids,
                contexts,
                cluster_flows.mixed_expected,
                cluster_flows.MIXED_RUNS,
                "nap",
                exact=False,
            )
            # the victim's worker reconnected by itself: only it serves the probe queue
            async with AsyncClient(restarted.target) as client:
                probes = await start_instances([client], cluster_flows.PROBE, range(3))
                for instance_id in probes:
                    info = await client.wait(instance_id, timeout=30)
                    assert info.status == "COMPLETED", f"{info}\n{cluster.logs()}"
                    assert info.context["probed_by"] == f"w-{victim.name}"
            print(f"all finished {recovered:.1f} s after the kill; {stats}")
        finally:
            await close_all(clients)


@pytest.mark.timeout(120)
async def test_clients_start_again_on_a_server_killed_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client's starts ride one ClientSession stream (wiggle/_client/start_stream.py), open and
    # idle here when the server is killed -9. Once it is back on its port, the next start of a
    # blocking and of an asyncio client goes on a new stream, with no error. (A start under an
    # active trace is a unary call of its own: an earlier test's TracerProvider must not turn the
    # stream off here.)
    monkeypatch.setattr(wiggle_tracing, "active", lambda: False)
    with cluster_in(tmp_path) as cluster:
        (server,) = await cluster.start_servers(["a"])
        aclient = AsyncClient(server.target)
        bclient = Client(server.target)
        try:
            await aclient.register(cluster_flows.probe_flow())
            ids = [
                (await aclient.start(cluster_flows.PROBE, {"n": 1})).instance_id,
                (await asyncio.to_thread(bclient.start, cluster_flows.PROBE, {"n": 2})).instance_id,
            ]
            assert aclient._stream._call is not None and bclient._stream._call is not None
            cluster.kill(server.proc)
            await asyncio.sleep(0.5)
            await cluster.ready(cluster.spawn_server("a", port=server.port))
            ids.append((await aclient.start(cluster_flows.PROBE, {"n": 3})).instance_id)
            ids.append((await asyncio.to_thread(bclient.start, cluster_flows.PROBE, {"n": 4})).instance_id)
            contexts = [(await aclient.get(instance_id)).context for instance_id in ids]
            assert contexts == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]
        finally:
            bclient.close()
            await aclient.close()


@pytest.mark.timeout(150)
async def test_postgres_restart_mid_load(tmp_path: Path) -> None:
    # on a PostgreSQL of its own: the shared server, and the tests running beside this one, are
    # never stopped
    n_instances = 200
    with PrivatePostgres() as pg, cluster_in(tmp_path, pg.url, WIGGLE_LEASE_MILLIS="8000") as cluster:
        servers = await cluster.start_servers(["a", "b"])
        for server in servers:
            cluster.start_worker(f"w-{server.name}", server)
        clients = [AsyncClient(s.target) for s in servers]
        try:
            await clients[0].register(cluster_flows.mixed_flow())
            ids = await start_instances(clients, cluster_flows.MIXED, range(n_instances))
            await cluster.wait_completed_share(cluster_flows.MIXED, n_instances // 4)
            some_id = next(iter(ids))
            pg.stop()
            down_at = time.monotonic()
            try:
                # during the outage: a read and the CLI's read, which ride through it (the client
                # asks again while the server answers UNAVAILABLE, for up to 30 s), and a start
                # without a request id: made again as long as the server says nothing of it was
                # applied (it found no connection), so it rides through too; one that met a
                # connection dying under its COMMIT may or may not have been applied and fails
                # at once, saying so (docs/failover.md#a-server-without-its-database)
                starting = asyncio.ensure_future(timed(clients[1].start(cluster_flows.MIXED, {"n": -1})))
                reads = asyncio.gather(
                    timed(clients[0].get(some_id)),
                    asyncio.to_thread(
                        subprocess.run,
                        [*WIGGLE, "--target", servers[1].target, "get", some_id],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    ),
                )
                await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - down_at)))
                assert not reads.done(), "the reads still ask"
            finally:
                pg.start()
            (get_error, get_seconds), cli = await reads
            start_error, start_seconds = await starting
            outage = time.monotonic() - down_at
            if start_error is not None:
                assert isinstance(start_error, Unavailable) and not start_error.not_applied, repr(start_error)
                assert "may or may not have been applied" in str(start_error), str(start_error)
                assert start_seconds < 20, f"StartInstance took {start_seconds:.1f} s to fail"
            assert get_error is None, f"GetInstance across the outage: {get_error!r}"
            assert cli.returncode == 0 and some_id in cli.stdout, (
                f"CLI exit {cli.returncode}: {cli.stdout} {cli.stderr}"
            )
            await cluster.wait_finished(cluster_flows.MIXED, n_instances, timeout=100)
            contexts = await completed_contexts(clients[0], cluster_flows.MIXED)
            stats = verify(
                cluster,
                ids,
                contexts,
                cluster_flows.mixed_expected,
                cluster_flows.MIXED_RUNS,
                "nap",
                exact=False,
            )
            total = sum(status_counts(cluster.schema, cluster_flows.MIXED).values())
            if start_error is None:  # the start made exactly one instance
                assert total == n_instances + 1, total
            else:  # may or may not have been applied
                assert total in (n_instances, n_instances + 1), total
            print(
                f"outage {outage:.1f} s; GetInstance answered after {get_seconds:.1f} s, "
                f"StartInstance {start_error or 'answered'} after {start_seconds:.1f} s; {stats}"
            )
        finally:
            await close_all(clients)


# ---------------------------------------------------------------------------- 3. schema and processes


def run_wiggle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WIGGLE, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.timeout(90)
async def test_server_creates_fresh_schema_and_migrate_is_idempotent(tmp_path: Path) -> None:
    fresh, migrated, racing = new_schema_name(), new_schema_name(), new_schema_name()
    try:
        assert not schema_exists(fresh)
        cluster = Cluster(tmp_path, fresh)
        try:
            server = await cluster.ready(cluster.spawn_server("fresh"))
            tables = {
                r[0] for r in query(fresh, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (fresh,))
            }
            assert {"schema_version", "definitions", "instances", "tokens", "history"} <= tables
            applied = query(fresh, "SELECT version, name FROM {s}.schema_version ORDER BY version")
            assert applied == [(v, name) for v, name, _ in migration_files()]
            async with AsyncClient(server.target) as client:
                info = await client.register(cluster_flows.probe_flow())
                assert info.created
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(15) == 0, cluster.logs()
        finally:
            cluster.stop()

        env = server_env(fresh)
        for schema, first in ((fresh, 0), (migrated, len(migration_files()))):
            outputs = []
            for _ in range(2):
                result = run_wiggle(
                    "migrate", "--database-url", TEST_DATABASE_URL, "--database-schema", schema, env=env
                )
                assert result.returncode == 0, result.stderr
                outputs.append(result.stdout)
            assert f"{first} migration(s) applied" in outputs[0], outputs
            assert "0 migration(s) applied" in outputs[1], outputs
        assert query(migrated, "SELECT version FROM {s}.schema_version ORDER BY version") == [
            (v,) for v, _, _ in migration_files()
        ]

        # two migrations at once: the advisory lock lets one apply, the other finds it done
        racers = [
            subprocess.Popen(
                [*WIGGLE, "migrate", "--database-url", TEST_DATABASE_URL, "--database-schema", racing],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        results = [p.communicate(timeout=60) + (p.returncode,) for p in racers]
        assert [r[2] for r in results] == [0, 0], results
        assert sorted(int(re.search(r"(\d+) migration", r[0]).group(1)) for r in results) == [
            0,
            len(migration_files()),
        ], results  # type: ignore[union-attr]
    finally:
        for schema in (fresh, migrated, racing):
            drop_schema(schema)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return False


def _sockets(port: int) -> dict[int, str]:
    """inode -> TCP state ('0A' listening, '01' established) of the sockets bound to local ``port``."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # gRPC listens on a dual-stack IPv6 socket
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                out[int(fields[9])] = fields[3]
    return out


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
    return inodes


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["flag", "env"])
async def test_processes_share_one_port(tmp_path: Path, how: str) -> None:
    """``wiggle server --processes 2`` (or WIGGLE_PROCESSES=2): two processes serve one port, and
    SIGTERM to the parent stops them all."""
    port = free_port()
    with temp_schema() as schema:
        cluster = Cluster(tmp_path, schema)
        argv = [*WIGGLE, "server", "--port", str(port)] + (["--processes", "2"] if how == "flag" else [])
        env = server_env(schema, **({"WIGGLE_PROCESSES": "2"} if how == "env" else {}))
        log = tmp_path / "server-multi.log"
        with open(log, "wb") as out:
            parent = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        cluster.procs.append(parent)
        children: list[int] = []
        clients: list[AsyncClient] = []
        try:
            deadline = time.monotonic() + 60
            while len(LISTENING.findall(log.read_text())) < 2:
                children = sorted(set(children) | set(_children(parent.pid)))
                assert parent.poll() is None, f"server exited with {parent.returncode}:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"two processes never listened:\n{log.read_text()}"
                await asyncio.sleep(0.05)
            children = sorted(set(children) | set(_children(parent.pid)))
            assert len(children) == 2, children
            listeners = {i for i, state in _sockets(port).items() if state == "0A"}
            assert len(listeners) == 2, f"{len(listeners)} listening sockets on port {port}"
            assert all(listeners & _socket_inodes(c) for c in children), "each child listens on the port"

            server = Server("multi", parent, log)
            server.port = port
            cluster.start_worker("w-multi", server)
            # separate subchannel pools: separate TCP connections, which the kernel spreads
            target = server.target
            clients = [
                AsyncClient(
                    target, grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
                )
                for _ in range(12)
            ]
            await clients[0].register(cluster_flows.mixed_flow())
            ids = await start_instances(clients, cluster_flows.MIXED, range(40))
            established = {i for i, state in _sockets(port).items() if state == "01"}
            serving = [c for c in children if established & _socket_inodes(c)]
            assert len(serving) == 2, f"connections reached only {serving} of {children}"
            await cluster.wait_finished(cluster_flows.MIXED, len(ids), timeout=40)
            contexts = await completed_contexts(clients[-1], cluster_flows.MIXED)
            verify(
                cluster,
                ids,
                contexts,
                cluster_flows.mixed_expected,
                cluster_flows.MIXED_RUNS,
                "nap",
                exact=True,
            )

            await close_all(clients)
            clients = []
            cluster.workers["w-multi"].terminate()
            cluster.workers["w-multi"].wait(15)
            parent.send_signal(signal.SIGTERM)  # what a process manager sends to stop the service
            deadline = time.monotonic() + 10  # the servers' grace is 5 s
            while any(_alive(c) for c in children) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            orphans = [c for c in children if _alive(c)]
            assert not orphans, f"SIGTERM to the parent left server processes {orphans} running"
            assert parent.wait(5) is not None
        finally:
            await close_all(clients)
            cluster.stop()
            for pid in children:  # ours, by pid, if the parent left them behind
                with contextlib.suppress(ProcessLookupError):
                    if _alive(pid):
                        os.kill(pid, signal.SIGKILL)
