"""The store contract (wiggle/_storage/base.py) leaves nothing to a silent default: a store that
forgets an operation cannot be made, and both stores implement every one."""

from __future__ import annotations

import inspect

import pytest

from wiggle._storage.base import Store
from wiggle._storage.memory import MemoryStore
from wiggle._storage.postgres.store import PostgresStore

OPERATIONAL = {
    "clock_leader",
    "purge_finished",
    "orphaned_children",
    "count_by_status",
    "queue_stats",
    "readiness",
    "cluster_nodes",
}


def test_every_store_operation_is_abstract() -> None:
    assert OPERATIONAL <= Store.__abstractmethods__


@pytest.mark.parametrize("store", [MemoryStore, PostgresStore])
def test_both_stores_implement_every_operation(store: type[Store]) -> None:
    assert not inspect.isabstract(store), getattr(store, "__abstractmethods__", None)
    for name in Store.__abstractmethods__:
        assert getattr(store, name) is not getattr(Store, name), f"{store.__name__} leaves {name} to the base"


def test_a_store_that_forgets_one_cannot_be_made() -> None:
    # every operation but purge_finished, as a new store might leave it out
    methods = {name: getattr(MemoryStore, name) for name in Store.__abstractmethods__ - {"purge_finished"}}
    forgetful = type("Forgetful", (Store,), methods)
    with pytest.raises(TypeError, match="purge_finished"):
        forgetful()
