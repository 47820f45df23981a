"""Workflow definitions in PostgreSQL, with a per-node cache (a version never changes once stored)."""

from __future__ import annotations

import asyncio

from ..._engine.engine import LoadedDefinition
from ..._model import definition_from_json, validate_name
from ...errors import NotFound
from ..base import WorkflowRecord, check_version_alias
from .db import Conn, Database
from .statements import Queries

__all__ = ["Definitions"]


class Definitions:
    """Definition versions by (name, version): stored once, cached on first read."""

    def __init__(self, db: Database, queries: Queries) -> None:
        self.db = db
        self.queries = queries
        self.records: dict[tuple[str, str], WorkflowRecord] = {}
        # Latest-version lookups not sent yet, by name: concurrent starts share one (see latest()).
        self._latest: dict[str, asyncio.Future[str | None]] = {}
        self._lookups: set[asyncio.Task[None]] = set()
        self.latest_queries = 0  # latest-version statements sent (tests count them)
        # The latest version of each name as this node last read or registered it: starts begin
        # from it without a read, and their transaction confirms it (hint(), start_commit.py).
        self.latest_seen: dict[str, str] = {}

    def hint(self, name: str) -> WorkflowRecord | None:
        """The remembered latest version of ``name`` (None if not known): not confirmed, a start
        made from it sets NewInstance.expect_latest so that its commit confirms it."""
        version = self.latest_seen.get(name)
        return None if version is None else self.records.get((name, version))

    def forget_latest(self, name: str, version: str) -> None:
        """``version`` is no longer the latest of ``name`` (a start's commit found a newer one)."""
        if self.latest_seen.get(name) == version:
            del self.latest_seen[name]

    async def latest(self, name: str) -> str | None:
        """The latest registered version of ``name`` (None if none), as of a read made after this call.

        Concurrent callers share one read, which is sent only after each of them has joined it:
        a version registered (and acknowledged) before a caller's call is always seen, so a start
        never picks an older version than its caller could know of, while a burst of starts costs
        one statement instead of one each.
        """
        lookup = self._latest.get(name)
        if lookup is None:
            lookup = asyncio.get_running_loop().create_future()
            self._latest[name] = lookup
            task = asyncio.ensure_future(self._look_up(name, lookup))
            self._lookups.add(task)
            task.add_done_callback(self._lookups.discard)
        return await asyncio.shield(lookup)

    async def _look_up(self, name: str, lookup: asyncio.Future[str | None]) -> None:
        def close_door() -> None:
            # From here on the read is being sent: later callers must not join it.
            if self._latest.get(name) is lookup:
                del self._latest[name]

        async def body(conn: Conn) -> str | None:
            close_door()
            self.latest_queries += 1
            cur = await conn.execute(self.queries.latest_version, (name,))
            row = await cur.fetchone()
            if row is None:
                return None
            self.latest_seen[name] = str(row[0])
            return str(row[0])

        try:
            version = await self.db.run("get_workflow", body)
        except BaseException as exc:
            close_door()
            if not lookup.done():
                lookup.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            lookup.set_result(version)

    async def loaded_record(self, conn: Conn, name: str, version: str) -> WorkflowRecord:
        """A definition version, from the cache or read on ``conn`` (inside its transaction)."""
        record = self.records.get((name, version))
        if record is None:
            cur = await conn.execute(self.queries.definition, (name, version), binary=True)
            row = await cur.fetchone()
            if row is None:
                raise NotFound(f"workflow {name!r} has no version {version!r}")
            record = self.cache(name, version, row[0], row[1])
        return record

    def cache(self, name: str, version: str, data: bytes, registered_at: int) -> WorkflowRecord:
        """The cached record of a version, decoding ``data`` the first time."""
        record = self.records.get((name, version))
        if record is None:
            record = WorkflowRecord(
                LoadedDefinition(definition_from_json(bytes(data)), version), registered_at
            )
            self.records[(name, version)] = record
        return record

    async def put(self, loaded: LoadedDefinition, now: int) -> tuple[WorkflowRecord, bool]:
        """Insert a version unless it exists, registered at ``now`` (ms); (record, created)."""
        definition = loaded.definition
        key = (definition.name, loaded.version)
        cached = self.records.get(key)
        if cached is not None:
            return cached, False

        async def body(conn: Conn) -> tuple[WorkflowRecord, bool]:
            cur = await conn.execute(
                self.queries.insert_definition, (definition.name, loaded.version, loaded.json, now)
            )
            row = await cur.fetchone()
            if row is not None:
                self.latest_seen[definition.name] = loaded.version  # newest registered (the commit checks it)
                return self.records.setdefault(key, WorkflowRecord(loaded, row[0])), True
            cur = await conn.execute(self.queries.definition, key, binary=True)
            existing = await cur.fetchone()
            if existing is None:  # pragma: no cover - definitions are never deleted
                raise NotFound(f"workflow {definition.name!r} has no version {loaded.version!r}")
            return self.cache(definition.name, loaded.version, existing[0], existing[1]), False

        return await self.db.run("register", body)

    async def get(self, name: str, version: str = "") -> WorkflowRecord:
        """A version by name (latest if ``version`` is empty); NotFound naming what is missing."""
        validate_name(name, "workflow")
        if version and (name, version) in self.records:
            return self.records[(name, version)]
        if not version:
            latest = await self.latest(name)
            if latest is None:
                raise NotFound(f"workflow {name!r} is not registered")
            record = self.records.get((name, latest))
            if record is not None:
                return record
            version = latest

        async def body(conn: Conn) -> WorkflowRecord:
            wanted = version
            if not wanted:
                cur = await conn.execute(self.queries.latest_version, (name,))
                row = await cur.fetchone()
                if row is None:
                    raise NotFound(f"workflow {name!r} is not registered")
                wanted = row[0]
                self.latest_seen[name] = wanted
                if (name, wanted) in self.records:
                    return self.records[(name, wanted)]
            cur = await conn.execute(self.queries.definition, (name, wanted), binary=True)
            row = await cur.fetchone()
            if row is not None:
                return self.cache(name, wanted, row[0], row[1])
            cur = await conn.execute(self.queries.latest_version, (name,))
            if await cur.fetchone() is None:
                raise NotFound(f"workflow {name!r} is not registered")
            raise NotFound(f"workflow {name!r} has no version {wanted!r}")

        return await self.db.run("get_workflow", body)

    async def versions(self, name: str = "") -> list[WorkflowRecord]:
        """Every version (of ``name``), oldest first."""
        rows = await self.db.fetch("list_workflows", self.queries.definitions, (name, name), binary=True)
        return [self.cache(r[0], r[1], r[3], r[2]) for r in rows]

    async def put_alias(self, workflow: str, alias: int, version: str) -> None:
        """Point ``alias`` at ``version`` of ``workflow`` (upsert); NotFound if it is not registered."""
        check_version_alias(workflow, alias, version)
        await self.get(workflow, version)  # NotFound naming what is missing; definitions stay

        async def body(conn: Conn) -> None:
            await conn.execute(self.queries.put_version_alias, (workflow, alias, version))

        await self.db.run("put_version_alias", body)

    async def aliases(self, workflow: str) -> dict[int, str]:
        """Every alias of ``workflow`` and the version it names, by alias ascending."""
        validate_name(workflow, "workflow")
        rows = await self.db.fetch("version_aliases", self.queries.version_aliases, (workflow,))
        return {int(r[0]): str(r[1]) for r in rows}
