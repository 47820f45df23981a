"""Upstream version numbers: int32 aliases of our content-hash versions (docs/upstream.md#version-numbers).

Upstream clients name a workflow version with an int32 and parse RegisterWorkflow's answer as
one; ours are 16-hex-digit content hashes. A definition registered with an explicit upstream
version keeps that number in the store's alias table (``Store.put_version_alias``, shared by
every server of a cluster); any other version is shown as ``derived_version(hash)``, computed
from the hash alone, so it needs no write and every server derives the same number.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import NotFound
from .definitions import derived_version

if TYPE_CHECKING:
    from .._server.instances import Instances

__all__ = ["Versions"]


class Versions:
    """Translate between upstream int versions and our hashes, one workflow at a time."""

    def __init__(self, instances: Instances) -> None:
        self.instances = instances
        # (workflow, hash) -> number, for activations only: a poll must not read the alias table
        # each time. Re-registering here drops the workflow's entries; a number re-pointed by
        # another server shows in this server's activations only after a restart (reads, which
        # use int_of, are always current).
        self._for_tasks: dict[tuple[str, str], int] = {}

    async def aliases(self, workflow: str) -> dict[str, int]:
        """hash -> the int it is shown as, for the versions of ``workflow`` with an explicit alias.

        When two aliases point at one hash (re-registered under a new number), the highest wins.
        """
        found: dict[str, int] = {}
        for alias, version in sorted((await self.instances.version_aliases(workflow)).items()):
            found[version] = alias
        return found

    async def int_of(self, workflow: str, version: str) -> int:
        """The upstream number of our ``version`` of ``workflow``."""
        alias = (await self.aliases(workflow)).get(version)
        return alias if alias is not None else derived_version(version)

    async def int_for_task(self, workflow: str, version: str) -> int:
        """``int_of``, remembered on this server: the version an activation shows."""
        key = (workflow, version)
        number = self._for_tasks.get(key)
        if number is None:
            number = self._for_tasks[key] = await self.int_of(workflow, version)
        return number

    async def hash_of(self, workflow: str, number: int) -> str:
        """Our version of ``workflow`` that upstream calls ``number``; NotFound if none."""
        explicit = await self.instances.version_aliases(workflow)
        if number in explicit:
            return explicit[number]
        for record in await self.instances.list_workflows(workflow):
            if derived_version(record.loaded.version) == number:
                return record.loaded.version
        raise NotFound(f"workflow {workflow!r} has no version {number}")

    async def remember(self, workflow: str, number: int, version: str) -> None:
        """Point ``number`` at ``version`` (an explicit upstream version, re-registrable)."""
        await self.instances.put_version_alias(workflow, number, version)
        for key in [k for k in self._for_tasks if k[0] == workflow]:
            del self._for_tasks[key]
