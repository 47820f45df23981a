"""The PostgreSQL store (a package: one job per module).

- ``store``: ``PostgresStore``, the persistence primitives of wiggle/_storage/base.py;
- ``group_commit``: concurrent mutations sharing transactions;
- ``start_commit``: concurrent starts sharing transactions, idempotent by request id;
- ``writes``: persisting what transitions changed;
- ``cluster``: LISTEN/NOTIFY wake-ups across nodes, peer counting, clock leadership;
- ``db``: the pool, dedicated connections, bounded retries;
- ``definitions``: definition versions and their cache;
- ``migrations`` (and the ``sql/`` files): the schema and its upgrades;
- ``statements``: every SQL statement; ``codecs``: rows <-> structs.
"""

from __future__ import annotations

from .migrations import SchemaTooNew, migrate, migration_files
from .store import PostgresStore

__all__ = ["PostgresStore", "SchemaTooNew", "migrate", "migration_files"]
