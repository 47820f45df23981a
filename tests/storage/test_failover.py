"""PostgreSQL fail-over under load, for real (docs/failover.md): not one acknowledged write lost.

The test makes its own PostgreSQL pair on loopback ports (tests/pg.py, ``PrivatePostgres``): a
primary with ``synchronous_standby_names`` and ``synchronous_commit = on``, and a streaming hot
standby made from it by ``pg_basebackup -R``. Two ``wiggle server`` processes connect to both
with a multi-host connection string (one in the key=value form, one as a URL, both with
``target_session_attrs=read-write``); a worker process serves each server; four clients start
instances and signal them in a loop, each retrying UNAVAILABLE with the same request id or signal
id, and record every acknowledged start and signal. Mid-load the primary is killed (SIGKILL to
the postmaster and all of its processes: the machine dies) and the standby promoted (``pg_ctl
promote``, what an HA manager would do); the load goes on, then drains.

Then, on the promoted server:

- the instances stored are exactly the starts acknowledged (none lost, none extra);
- every instance COMPLETED with the context its start and its acknowledged signal make;
- every report a worker had acknowledged is in the history, and the histories are clean: each
  step completed once at attempt 1, the timer fired once, the signal was taken once. The one
  exception the protocol allows is a claim whose commit reached the standby but whose answer
  never reached its worker (the primary died in between): nobody ran that attempt, its lease
  expires and the step runs as attempt 2. The test accepts it only for attempts no worker ran,
  and prints the count;
- one session of the new primary holds the clock-duty lock (the leadership moved), and the
  timers of instances started after the fail-over fired.

The outage each client saw (from its first failed call to its next success) is printed, not
asserted (no timed assertions; speed is for bench/).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from pg import PrivatePostgres
from psycopg import sql

from wiggle import AsyncClient
from wiggle._server.config import SETTINGS
from wiggle._storage.postgres.migrations import lock_key
from wiggle.errors import ErrorCode, NotFound, WiggleError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import failover_worker  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

_script = Path(sys.executable).with_name("wiggle")
WIGGLE = [str(_script)] if _script.exists() else [sys.executable, "-m", "wiggle.cli"]
LISTENING = re.compile(r"wiggle server listening on ([\d.]+):(\d+)")
SCHEMA = "wiggle_failover"
RETRYABLE = (ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED)
LOAD_BEFORE = 3.0  # seconds of load before the primary dies
# Seconds from the primary's death to the standby's promotion: what an HA manager takes to
# notice and act. Longer than a server waits for a pooled connection (5 s, db.py), so calls
# caught by the fail-over fail UNAVAILABLE and the clients retry them.
PROMOTE_AFTER = 6.0
LOAD_AFTER = 3.0  # seconds of load once the standby is promoted
GIVE_UP = 30.0  # a call still failing after this long fails the test
T = TypeVar("T")


# ---------------------------------------------------------------------------- processes


class Processes:
    """The wiggle servers and workers of the test, terminated (by pid) at the end."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        with open(self.dir / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)

    def server(self, name: str, dsn: str) -> None:
        ours = {var for _, var, _ in SETTINGS}
        env = {k: v for k, v in os.environ.items() if k not in ours}
        env.update(
            WIGGLE_HOST="127.0.0.1",
            WIGGLE_DATABASE_URL=dsn,
            WIGGLE_DATABASE_SCHEMA=SCHEMA,
            WIGGLE_POOL_SIZE="5",
            WIGGLE_LEASE_MILLIS="10000",  # outlives the outage: no running step's lease expires
            PYTHONUNBUFFERED="1",
        )
        self.spawn(name, [*WIGGLE, "server", "--port", "0"], env)

    def worker(self, name: str, target: str) -> None:
        self.spawn(name, [sys.executable, str(HERE / "failover_worker.py"), target, str(self.dir), name])

    def text(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")

    def logs(self, lines: int = 25) -> str:
        out = []
        for path in sorted(self.dir.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}\n{self.logs()}")

    async def until(self, what: str, done: Callable[[], Any], timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while not (result := done()):
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not after {timeout} s\n{self.logs()}")
            await asyncio.sleep(0.05)
        return result

    async def registered(self, target: str, workflow: str, timeout: float = 60.0) -> None:
        """Until the server at ``target`` has ``workflow`` registered (a worker registers it)."""
        deadline = time.monotonic() + timeout
        async with AsyncClient(target) as client:
            while not await client.list_workflows(workflow):
                self.check_alive()
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{workflow} not registered at {target} after {timeout} s\n{self.logs()}"
                    )
                await asyncio.sleep(0.05)

    async def listening(self, name: str) -> str:
        match = await self.until(f"server {name} listening", lambda: LISTENING.search(self.text(name)))
        return f"127.0.0.1:{match.group(2)}"

    def stop(self) -> None:
        alive = [p for p in self.procs.values() if p.poll() is None]
        for proc in alive:
            proc.terminate()
        for proc in alive:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@contextlib.contextmanager
def postgres_pair() -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    """A primary committing synchronously to the standby "standby", and that standby."""
    primary = PrivatePostgres.primary(standby_names=["standby"])
    try:
        standby = primary.standby("standby")
        try:
            yield primary, standby
        finally:
            standby.close()
    finally:
        primary.close()


# ---------------------------------------------------------------------------- the load


@dataclass
class Outage:
    """One stretch of failed calls a client saw: from the first failure to the next success."""

    started: float
    ended: float = 0.0
    failures: int = 0
    codes: Counter[str] = field(default_factory=Counter)


@dataclass
class Load:
    """Clients starting and signalling instances until ``stop`` is set; what was acknowledged."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    started: dict[str, int] = field(default_factory=dict)  # acknowledged start: instance id -> n
    signalled: dict[str, str] = field(default_factory=dict)  # acknowledged signal: instance id -> outcome
    outages: dict[str, list[Outage]] = field(default_factory=lambda: defaultdict(list))
    counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    vanished: set[str] = field(default_factory=set)  # acknowledged starts a signal found missing
    slowest: dict[str, float] = field(default_factory=dict)  # client -> its longest successful call
    after_failover: int = 0  # starts acknowledged after the promotion
    failed_over: bool = False

    async def call(self, client: str, make: Callable[[], Awaitable[T]]) -> T:
        """``make()`` until it succeeds, retrying UNAVAILABLE and DEADLINE_EXCEEDED; the outage kept."""
        outage: Outage | None = None
        while True:
            began = time.monotonic()
            try:
                result = await make()
            except WiggleError as exc:
                if exc.code not in RETRYABLE:
                    raise AssertionError(f"{client}: {exc.code.value} is not retryable: {exc}") from exc
                now = time.monotonic()
                if outage is None:
                    outage = Outage(began)
                    self.outages[client].append(outage)
                outage.failures += 1
                outage.codes[exc.code.value] += 1
                if now - outage.started > GIVE_UP:
                    raise AssertionError(
                        f"{client}: still {exc.code.value} after {GIVE_UP} s: {exc}"
                    ) from exc
                await asyncio.sleep(0.05)
                continue
            now = time.monotonic()
            if outage is not None:
                outage.ended = now
            self.slowest[client] = max(self.slowest.get(client, 0.0), now - began)
            return result

    async def client(self, name: str, target: str) -> None:
        """Start instances (with request ids) and signal them (with signal ids) until stopped:
        every other one at once (the signal waits, BUFFERED), the others once the instance has
        had time to reach its wait (DELIVERED, mostly)."""
        pending: list[tuple[float, str, int]] = []
        async with AsyncClient(target) as client:

            async def signal(instance_id: str, n: int) -> None:
                try:
                    result = await self.call(
                        name, lambda: client.signal(instance_id, "go", {"k": n}, signal_id=f"go-{name}-{n}")
                    )
                except NotFound:
                    self.vanished.add(instance_id)  # its acknowledged start was lost: the test fails
                    return
                self.signalled[instance_id] = str(result.outcome)

            while not self.stop.is_set():
                n = next(self.counter)
                start = functools.partial(
                    client.start, failover_worker.FLOW, {"n": n}, request_id=f"{name}-{n}"
                )
                info = await self.call(name, start)
                self.started[info.instance_id] = n
                self.after_failover += self.failed_over
                if n % 2:
                    pending.append((time.monotonic(), info.instance_id, n))
                else:
                    await signal(info.instance_id, n)
                while pending and (self.stop.is_set() or pending[0][0] < time.monotonic() - 0.5):
                    _, instance_id, m = pending.pop(0)
                    await signal(instance_id, m)
            for _, instance_id, m in pending:
                await signal(instance_id, m)


# ---------------------------------------------------------------------------- checking


def query(url: str, text: str, params: Any = ()) -> list[Any]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql.SQL(text).format(s=sql.Identifier(SCHEMA)), params).fetchall()


def clock_lock_holders(url: str) -> int:
    """Sessions holding the clock-duty advisory lock of SCHEMA (wiggle/_storage/postgres/cluster.py)."""
    key = lock_key("clock", SCHEMA) & 0xFFFF_FFFF_FFFF_FFFF
    rows = query(
        url,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (key >> 32, key & 0xFFFF_FFFF),
    )
    return int(rows[0][0])


def check_histories(url: str, ids: set[str], runs: list[dict[str, Any]], acks: set[str]) -> int:
    """The checks of the module docstring on the histories; the lost claims (see there) counted."""
    ran = {(r["i"], r["n"], r["a"]) for r in runs}
    ran_task = {r["t"]: (r["i"], r["n"], r["a"]) for r in runs}
    rows = query(
        url,
        "SELECT instance_id, node_id, attempt, outcome, error FROM {s}.history_entries "
        "WHERE instance_id = ANY(%s) ORDER BY seq, pos",
        (sorted(ids),),
    )
    entries: dict[str, list[tuple[str, int, str, str]]] = defaultdict(list)
    for instance_id, node, attempt, outcome, error in rows:
        entries[instance_id].append((node, attempt, outcome, error or ""))
    problems: list[str] = []
    lost_claims = 0
    for instance_id in ids:
        history = entries[instance_id]
        outcomes = Counter((node, outcome) for node, _, outcome, _ in history)
        for node in ("a", "b"):
            if outcomes[(node, "COMPLETED")] != 1:
                problems.append(f"{instance_id}: {node} COMPLETED {outcomes[(node, 'COMPLETED')]} times")
        for node, outcome in (("nap", "SLEPT"), ("go", "SIGNALLED")):
            if outcomes[(node, outcome)] != 1 or sum(v for (n, _), v in outcomes.items() if n == node) != 1:
                problems.append(f"{instance_id}: {node} not {outcome} once: {sorted(outcomes.items())}")
        if sum(v for (_, o), v in outcomes.items() if o == "END") != 1:
            problems.append(f"{instance_id}: not ended once: {sorted(outcomes.items())}")
        for node, attempt, outcome, error in history:
            if outcome == "RETRY":
                if "lease expired" in error and (instance_id, node, attempt) not in ran:
                    lost_claims += 1  # claimed, committed, never delivered: nobody ran it
                else:
                    problems.append(f"{instance_id}: {node} attempt {attempt} {outcome}: {error}")
    completed = {(i, node, attempt) for i in ids for node, attempt, o, _ in entries[i] if o == "COMPLETED"}
    for task in acks:
        step = ran_task.get(task)
        if step is None:
            problems.append(f"report of {task} acknowledged but its run is not recorded")
        elif step[0] in ids and step not in completed:
            problems.append(f"{step}: its report was acknowledged but is not in the history")
    assert not problems, f"{len(problems)} problems, first ones:\n" + "\n".join(problems[:20])
    return lost_claims


async def wait_finished(procs: Processes, url: str, count: int, timeout: float = 60.0) -> None:
    """Until ``count`` instances are finished; else fail naming where the others wait (an
    acknowledged signal or report that was lost leaves its instance waiting forever)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = query(url, "SELECT count(*) FROM {s}.instances WHERE status <> 'RUNNING'")
        if int(rows[0][0]) >= count:
            return
        procs.check_alive()
        if time.monotonic() > deadline:
            waiting = query(
                url,
                "SELECT node_id, status, count(*) FROM {s}.tokens WHERE status NOT IN ('DONE', 'FAILED', 'CANCELLED') "
                "GROUP BY 1, 2",
            )
            raise AssertionError(
                f"{count - int(rows[0][0])} instances still running after {timeout} s; active tokens "
                f"(node, status, count): {waiting}\n{procs.logs()}"
            )
        await asyncio.sleep(0.25)


def outage_report(load: Load) -> str:
    lines = []
    for client in sorted(load.slowest):
        outages = load.outages.get(client, [])
        seen = "; ".join(
            f"{o.ended - o.started:.2f} s of retries ({', '.join(f'{c} x{k}' for c, k in o.codes.items())})"
            for o in outages
        )
        lines.append(
            f"  {client}: longest successful call {load.slowest[client]:.2f} s; {seen or 'no failed call'}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the test


@pytest.mark.timeout(150)
async def test_failover_to_a_synchronous_standby_loses_no_acknowledged_write(tmp_path: Path) -> None:
    began = time.monotonic()
    with postgres_pair() as (primary, standby):
        # the standby streams, synchronously: from here on a commit is acknowledged only once
        # the standby has flushed it
        procs = Processes(tmp_path)
        await procs.until(
            "standby in sync", lambda: ("standby", "streaming", "sync") in primary.streaming_to()
        )
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        key_value = (
            f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres dbname=postgres "
            "target_session_attrs=read-write"
        )
        url = f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
        try:
            procs.server("server-a", key_value)
            targets = [await procs.listening("server-a")]
            procs.server("server-b", url)  # after a: it created the schema
            targets.append(await procs.listening("server-b"))
            for k, target in enumerate(targets):
                procs.worker(f"w{k}", target)
            for k in range(len(targets)):
                await procs.until(f"worker w{k} ready", (tmp_path / f"ready-w{k}").exists)
            # a worker's ready file is written before it registers the workflow: the load
            # begins once every server knows it (a start before that is NOT_FOUND, which a
            # client does not retry: seen once in CI under load)
            for target in targets:
                await procs.registered(target, failover_worker.FLOW)

            load = Load()
            clients = [
                asyncio.ensure_future(load.client(f"c{k}", targets[k % len(targets)])) for k in range(4)
            ]
            try:
                load_began = time.monotonic()
                await asyncio.sleep(LOAD_BEFORE)
                assert load.started, f"no start acknowledged before the fail-over\n{procs.logs()}"
                acknowledged_before = len(load.started)
                killed_at = time.monotonic()
                primary.kill()
                await asyncio.sleep(PROMOTE_AFTER)
                await asyncio.to_thread(standby.promote)
                promoted_in = time.monotonic() - killed_at
                load.failed_over = True
                await asyncio.sleep(LOAD_AFTER)
                await procs.until("starts acknowledged after the fail-over", lambda: load.after_failover >= 8)
            finally:
                load.stop.set()
                done = await asyncio.gather(*clients, return_exceptions=True)
            for result in done:
                if isinstance(result, BaseException):
                    raise AssertionError(f"a client failed: {result!r}\n{procs.logs()}") from result
            procs.check_alive()

            load_ended = time.monotonic()
            new = standby.url
            ids = set(load.started)
            stored_ids = {r[0] for r in query(new, "SELECT id FROM {s}.instances")}
            assert stored_ids == ids, (
                f"acknowledged {len(ids)} starts, stored {len(stored_ids)}: lost {len(ids - stored_ids)} "
                f"{sorted(ids - stored_ids)[:5]}, never acknowledged {sorted(stored_ids - ids)[:5]}"
            )
            assert not load.vanished, f"acknowledged starts found missing by their signal: {load.vanished}"
            assert set(load.signalled) == ids, "a start was acknowledged but its signal never was"
            await wait_finished(procs, new, len(ids))
            stored = {
                r[0]: (r[1], json.loads(r[2]))
                for r in query(new, "SELECT id, status, context FROM {s}.instances")
            }
            wrong = {
                i: row
                for i, row in stored.items()
                if row != ("COMPLETED", failover_worker.expected(load.started[i]))
            }
            assert not wrong, f"{len(wrong)} instances not COMPLETED as expected: {list(wrong.items())[:5]}"

            runs, acks = failover_worker.read_lines(tmp_path)
            lost_claims = check_histories(new, ids, runs, acks)
            assert clock_lock_holders(new) == 1, "no single clock leader on the promoted primary"

            print(
                f"\nfail-over: the primary was killed after {acknowledged_before} acknowledged starts; "
                f"the standby was promoted {promoted_in:.2f} s later (after a wait of {PROMOTE_AFTER} s)"
                f"\nacknowledged: {len(ids)} starts ({load.after_failover} after the fail-over), "
                f"{len(load.signalled)} signals ({dict(Counter(load.signalled.values()))}), {len(acks)} reports"
                f"\nstored: {len(stored)} instances, all COMPLETED with their signal's data; "
                f"claims lost in the crash (attempt never delivered, redelivered after its lease): {lost_claims}"
                f"\noutage seen by each client:\n{outage_report(load)}"
                f"\ntimes: {load_began - began:.1f} s to set up, {load_ended - load_began:.1f} s of load, "
                f"{time.monotonic() - load_ended:.1f} s to drain and check"
            )
        finally:
            procs.stop()
