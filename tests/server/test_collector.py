"""The server process's garbage collector (wiggle/_server/collector.py, WIGGLE_GC_THRESHOLD): once
``wiggle server`` is up, its start-up objects are frozen out of collections and young collections
come every 20,000 net allocations; 0 leaves Python's collector as it is."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from wiggle._server.collector import tune_collector
from wiggle._server.config import from_mapping
from wiggle.errors import InvalidArgument


@pytest.fixture
def collector() -> Iterator[None]:
    """Put this process's collector back as it was (the tests change process-wide state)."""
    thresholds = gc.get_threshold()
    frozen = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() != frozen:
        gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_a_threshold_freezes_the_living_and_raises_the_young_threshold(collector: None) -> None:
    middle, oldest = gc.get_threshold()[1:]
    alive = {"kept": [1, 2]}
    assert any(o is alive for o in gc.get_objects())

    assert tune_collector(12_345) is True

    assert gc.get_threshold() == (12_345, middle, oldest)
    # frozen: out of every generation the collector walks, and still alive
    assert not any(o is alive for o in gc.get_objects())
    assert alive == {"kept": [1, 2]}
    later = {"made": ["after"]}
    assert any(o is later for o in gc.get_objects())  # what comes after is collected as usual


def test_zero_leaves_the_collector_as_it_is(collector: None) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()

    assert tune_collector(0) is False

    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_the_setting_defaults_to_20000_and_refuses_a_negative_value() -> None:
    assert from_mapping({}, env={}).gc_threshold == 20_000
    assert from_mapping({}, env={"WIGGLE_GC_THRESHOLD": "0"}).gc_threshold == 0
    with pytest.raises(InvalidArgument, match="WIGGLE_GC_THRESHOLD"):
        from_mapping({}, env={"WIGGLE_GC_THRESHOLD": "-1"})


# A server process as `wiggle server` runs it (wiggle/_server/app.py serve): once it is ready, it
# prints its collector's state and stops itself with SIGTERM, as an operator would.
_SERVE = """
import asyncio, gc, json, os, signal
from wiggle._server.app import serve
from wiggle._server.config import from_mapping

def ready(server):
    print(json.dumps({"threshold": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

asyncio.run(serve(from_mapping({"port": 0}), ready=ready))
"""


def _served(env_value: str | None) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    if env_value is not None:
        env["WIGGLE_GC_THRESHOLD"] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _SERVE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    state: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return state


def test_the_wiggle_server_process_tunes_its_collector_once_it_is_up() -> None:
    state = _served(None)

    assert state["threshold"] == 20_000
    assert state["frozen"] > 10_000  # the modules, descriptors and tables loaded at start-up


def test_a_server_process_with_zero_keeps_python_s_collector() -> None:
    state = _served("0")

    assert state == {"threshold": 700, "frozen": 0}
