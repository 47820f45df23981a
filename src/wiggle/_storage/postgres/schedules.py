"""Schedules in PostgreSQL (migration 0004): the ``schedules`` and ``schedule_ticks`` tables.

A schedule row keeps the whole Schedule as JSON plus the columns the clock leader searches on.
A firing is one transaction: the schedule row is updated only if its revision is unchanged, a
``schedule_ticks`` row is inserted per tick (its primary key (schedule_id, tick_at) makes a second
instance for one tick impossible, even when two servers both believe they lead the clock), and the
started instances are written with the same writer as every other start
(docs/semantics.md#schedules).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable

import msgspec
from psycopg import errors as pg_errors
from psycopg import sql

from ..._engine.schedules import Schedule
from ..._engine.state import Changes
from ..schedules import ScheduledStart, ScheduleStore, schedule_exists, schedule_missing
from .db import Conn, Database
from .group_commit import Items

__all__ = ["PostgresSchedules"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Schedule).decode

Persist = Callable[[Conn, Items, frozenset[str]], Awaitable[bool]]
Announce = Callable[[str, Changes], None]


class _Refused(Exception):
    """Roll the firing back: the schedule changed or a tick already fired."""


class PostgresSchedules(ScheduleStore):
    """Schedules of a PostgresStore; ``persist`` and ``announce`` are the store's own."""

    def __init__(self, db: Database, schema: str, persist: Persist, announce: Announce) -> None:
        self.db = db
        self.persist = persist
        self.announce = announce
        s = sql.Identifier(schema).as_string()
        cols = "id, workflow, paused, next_tick_at, buffered, revision, body"
        self.q_insert = (
            f"INSERT INTO {s}.schedules ({cols}) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
        )
        self.q_get = f"SELECT body FROM {s}.schedules WHERE id = %s"
        self.q_list = f"SELECT body FROM {s}.schedules WHERE workflow = %s OR %s = '' ORDER BY id"
        self.q_update = (
            f"UPDATE {s}.schedules SET workflow = %s, paused = %s, next_tick_at = %s, buffered = %s, revision = %s, "
            "body = %s WHERE id = %s AND revision = %s"
        )
        self.q_delete = f"DELETE FROM {s}.schedules WHERE id = %s"
        self.q_delete_ticks = f"DELETE FROM {s}.schedule_ticks WHERE schedule_id = %s"
        self.q_due = (
            f"SELECT body FROM {s}.schedules WHERE NOT paused AND "
            "((next_tick_at > 0 AND next_tick_at <= %s) OR buffered) ORDER BY next_tick_at LIMIT %s"
        )
        self.q_next = f"SELECT min(next_tick_at) FROM {s}.schedules WHERE NOT paused AND next_tick_at > 0"
        self.q_purge = f"DELETE FROM {s}.schedule_ticks WHERE tick_at < %s"
        self.q_tick = (
            f"INSERT INTO {s}.schedule_ticks (schedule_id, tick_at, instance_id, fired_at) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
        )

    @staticmethod
    def _row(schedule: Schedule) -> tuple[bool, int, bool, int, bytes]:
        return (
            schedule.paused,
            schedule.next_tick_at,
            schedule.buffered_tick_at > 0,
            schedule.revision,
            _encode(schedule),
        )

    async def create(self, schedule: Schedule) -> None:
        paused, next_at, buffered, revision, body = self._row(schedule)
        params = (schedule.id, schedule.workflow, paused, next_at, buffered, revision, body)

        async def body_(conn: Conn) -> int:
            cur = await conn.execute(self.q_insert, params)
            return cur.rowcount

        if await self.db.run("create schedule", body_) != 1:
            raise schedule_exists(schedule.id)

    async def get(self, schedule_id: str) -> Schedule:
        rows = await self.db.fetch("get schedule", self.q_get, (schedule_id,))
        if not rows:
            raise schedule_missing(schedule_id)
        return _decode(rows[0][0])

    async def list(self, workflow: str = "") -> builtins.list[Schedule]:
        rows = await self.db.fetch("list schedules", self.q_list, (workflow, workflow))
        return [_decode(r[0]) for r in rows]

    async def _update(self, conn: Conn, schedule: Schedule, expected_revision: int) -> bool:
        paused, next_at, buffered, revision, body = self._row(schedule)
        cur = await conn.execute(
            self.q_update,
            (schedule.workflow, paused, next_at, buffered, revision, body, schedule.id, expected_revision),
        )
        return cur.rowcount == 1

    async def replace(self, schedule: Schedule, expected_revision: int) -> bool:
        async def body(conn: Conn) -> bool:
            return await self._update(conn, schedule, expected_revision)

        return await self.db.run("update schedule", body)

    async def delete(self, schedule_id: str) -> bool:
        async def body(conn: Conn) -> bool:
            async with conn.transaction():
                await conn.execute(self.q_delete_ticks, (schedule_id,))
                cur = await conn.execute(self.q_delete, (schedule_id,))
                return cur.rowcount == 1

        return await self.db.run("delete schedule", body)

    async def due(self, now: int, limit: int) -> builtins.list[Schedule]:
        rows = await self.db.fetch("due schedules", self.q_due, (now, limit))
        return [_decode(r[0]) for r in rows]

    async def next_due_at(self) -> int | None:
        ((due,),) = await self.db.fetch("next schedule", self.q_next)
        return None if due is None else int(due)

    async def purge_ticks(self, older_than: int) -> int:
        async def body(conn: Conn) -> int:
            cur = await conn.execute(self.q_purge, (older_than,))
            return cur.rowcount

        return await self.db.run("purge schedule ticks", body)

    async def fire(
        self, schedule: Schedule, expected_revision: int, starts: builtins.list[ScheduledStart]
    ) -> bool:
        async def body(conn: Conn) -> bool:
            try:
                async with conn.transaction():
                    if not await self._update(conn, schedule, expected_revision):
                        raise _Refused
                    for start in starts:
                        if start.manual:
                            continue
                        inst = start.state.instance
                        cur = await conn.execute(
                            self.q_tick, (schedule.id, start.tick_at, inst.id, inst.created_at)
                        )
                        if cur.rowcount != 1:
                            raise _Refused
                    if starts:
                        items: Items = [(s.state, s.changes, None) for s in starts]
                        await self.persist(conn, items, frozenset())
            except (_Refused, pg_errors.UniqueViolation):
                return False
            return True

        fired = await self.db.run("fire schedule", body)
        if fired:
            for start in starts:
                self.announce(start.state.instance.id, start.changes)
        return fired
