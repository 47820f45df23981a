"""A PostgreSQL cluster node: cross-node wake-ups (LISTEN/NOTIFY), peer counting, clock leadership.

Several server processes on one database cooperate through PostgreSQL only:

- ``LISTEN``/``NOTIFY`` wake long-polling workers, instance waiters and the clock duty on every
  node (one background listener connection per node, reconnected when it drops). A node sends
  NOTIFYs only while another node of its schema is connected (see ``Cluster.count_peers``): a
  lone server, the common case, spares PostgreSQL the notification queue and its listener
  wake-ups. They go out after the commit they announce, in a transaction of their own
  (``Cluster.post``), never inside it: PostgreSQL serializes every committing transaction that
  has notified on one database-wide lock held until its commit is flushed, so a NOTIFY inside
  the data's commit made the servers' commits wait for each other's WAL flushes. Of the work
  and finish NOTIFYs, only those another node has someone waiting for are sent (wakeups.py):
  under load nobody waits, and every listener of the database reads every NOTIFY;
- the clock duties (timers, lease expiry, user-task deadlines) run on the one node holding a
  session-level advisory lock on a dedicated connection; when that node dies its session ends,
  the lock is released and another node takes over at its next tick. A node that stops without
  dying (SIGSTOP, a paused VM, an event loop that never yields) keeps its socket open, and
  PostgreSQL would keep its lock for as long: so the leader's session is given an
  ``idle_session_timeout`` of ``stall_timeout`` and touched every quarter of it while the node
  runs (``_keep_leading``). Silent that long, PostgreSQL ends the session, the lock goes to
  another node, and the old leader, when it moves again, finds its session gone at its next
  check and stops acting (``ensure_leader``). Advisory locks live in one
  server's memory: after a fail-over (docs/failover.md) nobody holds the lock on the promoted
  primary, the old leader's connection is broken, and whichever node reconnects first takes it
  (never on a standby). Each duty action re-checks the token under the instance lock
  (wiggle/_server/instances.py), so even two leaders at once could not fire a timer twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
from collections.abc import Iterable

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from ..._engine.state import Changes
from ..base import SchemaMissing
from ..notifier import Notifier
from .db import Conn, Database, short, transaction
from .migrations import lock_key
from .statements import Queries
from .wakeups import FINISHED, WORK, Wakeups

__all__ = ["Cluster", "app_prefix"]

log = logging.getLogger("wiggle.postgres")


def app_prefix(schema: str) -> str:
    """The application_name prefix of every connection of a node on ``schema``: ``wiggle:<8 hex>:``.

    Peers find each other by it in pg_stat_activity (``wiggle:<hash>:<node id>[:role]``, at most
    42 characters: PostgreSQL keeps 63). No ``_`` or ``%``, so it is a literal LIKE prefix.
    """
    return f"wiggle:{hashlib.sha256(schema.encode()).hexdigest()[:8]}:"


class Cluster:
    """This node among the others on ``schema``: its listener, its peer count, its clock leadership."""

    PEER_CHECK_SECONDS = 2.0  # how often the listener recounts the other nodes on the schema
    #: The least time between the starts of two NOTIFY transactions of this node. What is posted
    #: meanwhile goes out in one transaction when it ends, so under load a node sends at most
    #: 100 a second, however many commits it makes, and each other node's listener reads as many;
    #: after a quiet spell the first goes out at once (docs/architecture.md, "Scaling").
    NOTIFY_SPACING_SECONDS = 0.01

    def __init__(
        self, schema: str, notifier: Notifier, queries: Queries, stall_timeout: float = 10.0
    ) -> None:
        self.schema = schema
        #: Seconds of silence after which PostgreSQL ends the clock leader's session (PostgreSQL
        #: 14 and later: ``idle_session_timeout``; before, only a connection that breaks ends it).
        self.stall_timeout = stall_timeout
        self.notifier = notifier
        self.queries = queries
        self.node_id = os.urandom(6).hex()  # tags our own NOTIFYs, so the listener skips them
        # Every connection of this node is named application_name + role suffix: the peer count
        # of other nodes looks for these names.
        self.app_prefix = app_prefix(schema)
        self.application_name = f"{self.app_prefix}{self.node_id}"
        self.peers = 0  # other nodes on this schema, as last counted (NOTIFY only when > 0)
        # Every other node says which wake-ups it wants (wakeups.py; none of an older version is
        # connected): send only those. False from a hello, or a lost listener, to the next count.
        self.filtering = False
        # The (kind, subject) wake-ups some other node wants, as last counted or told
        self.wanted: set[tuple[str, str]] = set()
        self.wakeups = Wakeups(self.node_id, self._wake)
        self.notifies_sent = 0  # NOTIFY transactions sent (for tests and diagnostics)
        prefix = schema[:48]
        self.channel_work = f"{prefix}_work"
        self.channel_finished = f"{prefix}_finished"
        self.channel_clock = f"{prefix}_clock"
        self.channel_peers = f"{prefix}_peers"  # "a node joined": count it at once
        self.db: Database | None = None
        self.leader = False
        self._listener: asyncio.Task[None] | None = None
        self._leader_conn: Conn | None = None
        self._leader_lock = asyncio.Lock()
        self._keeper: asyncio.Task[None] | None = None  # touches the leader's session (_keep_leading)
        self._clock_key = lock_key("clock", schema)
        self._pending: dict[tuple[str, str], None] = {}  # posted, not yet sent (in order, once each)
        self._sender: asyncio.Task[None] | None = None
        self._last_send = float("-inf")  # when the last NOTIFY transaction started (the loop's clock)

    async def open(self, db: Database) -> None:
        """Start listening (and say hello to the other nodes) over ``db``."""
        self.db = db
        q = self.queries
        await self.wakeups.open(db, q.want_wakeups, q.unwant_wakeups, q.drop_node_wakeups, self.channel_peers)
        conn = await db.retry_connect("listening", self.listen_connection)
        self._listener = asyncio.ensure_future(self.listen_forever(conn))

    async def close(self) -> None:
        """Stop listening and give up the clock leadership."""
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener
            self._listener = None
        if self._sender is not None:
            self._sender.cancel()  # wake-ups only: the committed work is found by the next polls
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sender
            self._sender = None
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keeper
        async with self._leader_lock:
            await self._drop_leadership()
        await self.wakeups.close()
        self.db = None

    def _wake(self, kind: str, subjects: list[str]) -> None:
        """Wake this node's waiters of ``kind`` about ``subjects`` to look again (wakeups.py).
        Not while no other node is connected: nobody else commits then, and a node that joins
        wakes every waiter here when it is heard of (``_joined``)."""
        if not self.peers:
            return
        if kind == WORK:
            self.notifier.work_ready(subjects)  # as if work was announced: every waiter looks again
        elif kind == FINISHED:
            self.notifier.recheck_instances()

    # ------------------------------------------------------------------ cross-node wake-ups

    async def listen_connection(self) -> Conn:
        """A connection LISTENing on this schema's channels, having said hello and counted peers."""
        assert self.db is not None, "Cluster.open first"
        conn = await self.db.connect("listen")
        try:
            for channel in (self.channel_work, self.channel_finished, self.channel_clock, self.channel_peers):
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            # Say hello (the nodes already there start notifying at once, not at their next
            # count) and count them: from here on this node hears what they commit.
            await self.count_peers(conn, hello=True)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def count_peers(self, conn: Conn, hello: bool = False) -> None:
        """Count the other live nodes on this schema (the listener's periodic check).

        Trade-off: a node sends NOTIFYs only while it knows of a peer. A node that joins says
        hello on the peers channel, which the others hear within milliseconds; should that be
        missed (a listener reconnecting), the join is noticed at the next count, within
        PEER_CHECK_SECONDS (~2 s), and until then the newcomer's pollers may miss wake-ups from
        the others' commits and find that work at their next poll instead. A node that left is
        dropped at the next count (until then the others send NOTIFYs nobody needs).
        """
        params = {"prefix": self.app_prefix + "%", "node": self.node_id}
        if hello:
            await conn.execute("SELECT pg_notify(%s, %s)", (self.channel_peers, self.node_id))
        cur = await conn.execute(self.queries.count_peers, params)
        row = await cur.fetchone()
        peers, unfiltered, stale = (int(row[0]), int(row[1]), bool(row[2])) if row else (0, 0, False)
        if peers != self.peers:
            log.debug("schema %s: %d other node(s) connected", self.schema, peers)
        # Hellos that arrived meanwhile are dispatched after this (psycopg keeps them in order).
        if peers > self.peers:
            self._joined()
        self.peers = peers
        self.filtering = not unfiltered
        wanted = {_key(item) for item in row[3]} if row else set()
        for kind, subject in wanted - self.wanted:  # not told by a message (lost, or before joining)
            self._catch_up(kind, subject)
        self.wanted = wanted
        if stale and self.leader:  # rows of nodes that are gone (killed): nobody reads their NOTIFYs
            await conn.execute(self.queries.drop_gone_wakeups, (self.app_prefix + "%",))

    async def listen_forever(self, conn: Conn | None) -> None:
        """Dispatch notifications forever, recounting peers; reconnect when the connection drops."""
        delay = 0.1
        while True:
            try:
                if conn is None:
                    await self.wakeups.rewrite()  # first: a row lost in a fail-over filters NOTIFYs
                    conn = await self.listen_connection()
                    log.info("notification listener reconnected")
                    self.notifier.wake_all()  # we may have missed notifications while disconnected
                    delay = 0.1
                while True:
                    # notifies() ends by itself once the interval is over, after the batch it read
                    # (one packet's notifications), so a steady stream does not postpone the count.
                    # It must not be left in the middle of a batch: psycopg drops what it read and
                    # did not yield yet, and a NOTIFY dropped is a wake-up lost (a poll of this
                    # node waits out its wait for work another node committed).
                    async with contextlib.aclosing(conn.notifies(timeout=self.PEER_CHECK_SECONDS)) as notes:
                        async for note in notes:
                            self.dispatch(note.channel, note.payload)
                    await self.count_peers(conn)  # and a silent network failure shows up here
                    await self.wakeups.withdraw()
            except asyncio.CancelledError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                raise
            except Exception as exc:
                self.filtering = False  # what the others want is not heard now: send them everything
                if isinstance(exc, (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName)) and self.db:
                    self.db.schema_missing(exc, "listening")  # said once a minute while it lasts
                elif not isinstance(exc, SchemaMissing):  # the store says that once a minute
                    log.warning("notification listener lost its connection (%s); reconnecting", short(exc))
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                conn = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def dispatch(self, channel: str, payload: str) -> None:
        """Turn another node's NOTIFY into this node's wake-up."""
        node, _, value = payload.partition(":")
        if node == self.node_id:
            return  # announced locally right after our own commit
        if channel == self.channel_work:
            self.notifier.work_ready((value,))  # how many tokens is not known here: wake all
        elif channel == self.channel_finished:
            if value:
                self.notifier.instance_finished(value)
            else:  # a catch-up (``_catch_up``): every instance waiter reads again
                self.notifier.recheck_instances()
        elif channel == self.channel_clock and self.leader:
            self.notifier.clock_changed()  # only the leader's clock loop has anything to re-plan
        elif channel == self.channel_peers:
            if value.startswith("want:"):  # another node wrote a row of wanted wake-ups
                kind, subject = _key(value[5:])
                self.peers = max(self.peers, 1)
                self.wanted.add((kind, subject))
                self._catch_up(kind, subject)
                return
            self.peers = max(self.peers, 1)  # a node joined: notify from now on (recounted soon)
            self.filtering = False  # and all of it until the count says whether it filters too
            self._joined()

    def _joined(self) -> None:
        """Another node joined: it may have committed work before this node's rows of wanted
        wake-ups were written while it was alone (``_wake`` woke nobody then), so every waiter
        here looks again."""
        self.notifier.wake_all()

    def post(self, instance_id: str, changes: Changes, work: Iterable[str] | None = None) -> None:
        """Send the NOTIFYs other nodes need for ``changes`` of ``instance_id``, just committed.

        ``work``: the queues of ``changes.ready_queues`` that need other nodes' pollers (None:
        all of them). Steps that a poller of this node was woken for (``Notifier.work_ready``'s
        answer) need none: that poller claims them, and telling every other node made each of
        their waiting pollers claim too, all but one in vain (bench/README.md, "Round thirty").

        They are sent by one task per node (``_send``), each time all that was posted meanwhile
        in one transaction of its own (at most one a ``NOTIFY_SPACING_SECONDS``), with
        ``synchronous_commit`` off for it: PostgreSQL takes a database-wide lock for a
        transaction that notified, from its commit until the commit is flushed, so NOTIFYs
        inside the data's transactions made every server's commits wait for each other's WAL
        flushes (docs/architecture.md, "Scaling"), and a NOTIFY transaction waiting for its flush
        would hold that lock as long. Notifications are wake-ups, not
        state: one that is lost (a crash between the commit and the send) only makes the other
        nodes' pollers find the work at their next poll, as after a listener's reconnection.
        """
        if not self.peers:
            return  # nobody else listens: the store wakes this node's own waiters after the commit
        pending = self._pending
        every = not self.filtering
        wanted = self.wanted
        for queue in changes.ready_queues if work is None else work:
            if every or (WORK, queue) in wanted:
                pending[(self.channel_work, f"{self.node_id}:{queue}")] = None
        if changes.timers:
            pending[(self.channel_clock, self.node_id)] = None  # always: the leader re-plans
        if changes.finished and (every or (FINISHED, "") in wanted):
            pending[(self.channel_finished, f"{self.node_id}:{instance_id}")] = None
        self._send_soon()

    def post_work(self, queue: str) -> None:
        """Tell the other nodes that wait for steps of ``queue`` (if any) that it has one: a
        wake-up this node's poller took and left unused (``Notifier.pass_on``)."""
        if self.peers and (not self.filtering or (WORK, queue) in self.wanted):
            self._pending[(self.channel_work, f"{self.node_id}:{queue}")] = None
            self._send_soon()

    def _catch_up(self, kind: str, subject: str) -> None:
        """Another node now wants wake-ups of ``kind`` about ``subject``: it may have begun to wait
        before this node knew, and this node's commits since then told it nothing, so wake its
        waiters of that kind once (they look again). wakeups.py, "No lost wake-up"."""
        if not self.peers:
            return
        if kind == WORK:
            self._pending[(self.channel_work, f"{self.node_id}:{subject}")] = None
        elif kind == FINISHED:
            self._pending[(self.channel_finished, f"{self.node_id}:")] = None
        self._send_soon()

    def _send_soon(self) -> None:
        if self._pending and self.db is not None and (self._sender is None or self._sender.done()):
            self._sender = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        """Send what was posted, one transaction at a time and at most one a
        ``NOTIFY_SPACING_SECONDS``, until nothing is left."""
        loop = asyncio.get_running_loop()
        while self._pending and self.db is not None:
            wait = self._last_send + self.NOTIFY_SPACING_SECONDS - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)  # what is posted meanwhile joins this batch
            self._last_send = loop.time()
            batch, self._pending = list(self._pending), {}
            params = ([c for c, _ in batch], [p for _, p in batch])
            self.notifies_sent += 1
            try:
                await self.db.run("notify", functools.partial(self._notify, params=params))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the work is committed; the others find it when they poll
                log.warning("could not notify the other nodes (%s)", short(exc))

    async def _notify(self, conn: Conn, params: tuple[list[str], list[str]]) -> None:
        async with transaction(conn):
            await conn.execute("SET LOCAL synchronous_commit TO off")
            await conn.execute(self.queries.notify, params)

    # ------------------------------------------------------------------ clock leadership

    @property
    def is_clock_leader(self) -> bool:
        """True while this node holds the clock-duty advisory lock."""
        return self.leader

    async def _drop_leadership(self) -> None:
        conn, self._leader_conn = self._leader_conn, None
        was_leader, self.leader = self.leader, False
        if conn is None:
            return
        with contextlib.suppress(Exception):
            if was_leader:
                log.info("giving up clock-duty leadership of schema %s", self.schema)
                # Unlock explicitly: the session's end would release it too, but only once the
                # server has noticed, and the next leader should not have to wait for that.
                await conn.execute("SELECT pg_advisory_unlock(%s)", (self._clock_key,))
        with contextlib.suppress(Exception):
            await conn.close()

    async def ensure_leader(self) -> bool:
        """Hold (or try to take) the clock-duty advisory lock on the dedicated connection."""
        async with self._leader_lock:
            db = self.db
            if db is None or db.pool is None:
                return False
            try:
                if self._leader_conn is None:
                    self._leader_conn = await db.connect("clock")
                conn = self._leader_conn
                if self.leader:
                    # Still our session, so still our lock, on a server that still takes writes.
                    # (A session PostgreSQL ended while this node was silent fails here.)
                    cur = await conn.execute("SELECT pg_is_in_recovery()")
                    row = await cur.fetchone()
                    if row is not None and not row[0]:
                        return True
                    log.warning("the clock-duty connection's server became a standby; reconnecting")
                    await self._drop_leadership()
                    return False
                # Advisory locks are per server and never replicated: the lock is only worth
                # taking on the primary (on a standby it would make a second leader).
                cur = await conn.execute(
                    "SELECT pg_is_in_recovery(), "
                    "CASE WHEN pg_is_in_recovery() THEN false ELSE pg_try_advisory_lock(%s) END",
                    (self._clock_key,),
                )
                row = await cur.fetchone()
                if row is not None and row[0]:
                    await self._drop_leadership()  # a standby: the next tick connects afresh
                elif row is not None and row[1]:
                    await self._limit_silence(conn)
                    self.leader = True
                    log.info(
                        "this node (%s) now runs the clock duties of schema %s", self.node_id, self.schema
                    )
                    if self._keeper is None or self._keeper.done():
                        self._keeper = asyncio.ensure_future(self._keep_leading())
                return self.leader
            except psycopg.Error as exc:
                if self.leader:
                    log.warning(
                        "this node (%s) lost the clock duties of schema %s, its leadership session ended "
                        "(%s); another node takes them over",
                        self.node_id,
                        self.schema,
                        short(exc),
                    )
                else:
                    log.warning("clock-duty leadership connection failed: %s", short(exc))
                await self._drop_leadership()
                return False

    async def _limit_silence(self, conn: Conn) -> None:
        """Have PostgreSQL end the leader's session after ``stall_timeout`` seconds without a
        statement (``idle_session_timeout``, PostgreSQL 14 and later), releasing the lock."""
        if conn.info.server_version >= 140000:
            millis = max(1, round(self.stall_timeout * 1000))
            await conn.execute("SELECT set_config('idle_session_timeout', %s, false)", (str(millis),))
        else:
            log.info(
                "PostgreSQL %d has no idle_session_timeout: a clock leader that hangs without dying "
                "keeps the clock duties until its connection breaks",
                conn.info.server_version // 10000,
            )

    async def _keep_leading(self) -> None:
        """While this node leads, touch its session every quarter of ``stall_timeout``, so that
        only a node that stopped running lets PostgreSQL end it (the clock loop's own checks may
        be further apart: one tick can take long); and end the other nodes' stalled transactions
        (``end_stalled``)."""
        every = max(0.05, self.stall_timeout / 4)
        refused = ""
        while self.leader:
            await asyncio.sleep(every)
            if self.leader and not await self.ensure_leader():
                return
            try:
                await self.end_stalled()
                refused = ""
            except psycopg.Error as exc:  # the next round tries again; said once
                if short(exc) != refused:
                    refused = short(exc)
                    log.warning("could not end the other servers' stalled sessions: %s", refused)

    async def end_stalled(self) -> int:
        """End the sessions of other nodes of this schema that have waited ``stall_timeout``
        inside a transaction for their node's next message; how many.

        A node that stops running (SIGSTOP, a paused VM) in the middle of a pipelined
        transaction leaves its session *active*, reading from the client, with its row locks
        held: ``idle_in_transaction_session_timeout`` (db.py) does not apply to it (nor does
        ``statement_timeout``), so the READY steps its claim locked were hidden from every other
        claim, and the others' reports on an instance it had locked waited, group commit and
        all, for as long as it was stopped (an outside trial; tests/integration/test_cluster.py).
        A running node never leaves a transaction waiting for it that long: its statements
        follow each other as fast as its event loop turns."""
        conn = self._leader_conn
        if conn is None or not self.leader:
            return 0
        cur = await conn.execute(
            self.queries.end_stalled,
            {"prefix": self.app_prefix + "%", "node": self.node_id, "seconds": self.stall_timeout},
        )
        ended = await cur.fetchall()
        for pid, name, seconds, _ in ended:
            log.warning(
                "ended PostgreSQL session %s of %s: it had waited %.0f s inside a transaction for its "
                "server, holding row locks the other servers need (a server frozen or cut off)",
                pid,
                name,
                seconds,
            )
        return len(ended)


def _key(item: str) -> tuple[str, str]:
    """``"<kind>:<subject>"`` as (kind, subject); the subject (a queue name) may hold ':'."""
    kind, _, subject = item.partition(":")
    return kind, subject
