"""What ``wiggle server`` sets up in its own process (wiggle/_server/process.py): the event loop it
runs on (WIGGLE_EVENT_LOOP, wiggle/_loop.py: uvloop where installed) and its garbage collector
(WIGGLE_GC_THRESHOLD: start-up objects frozen, young collections every 20,000 net allocations; 0
leaves Python's as it is)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from wiggle import _loop
from wiggle._server import process
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

    assert process.tune_collector(12_345) is True

    assert gc.get_threshold() == (12_345, middle, oldest)
    # frozen: out of every generation the collector walks, and still alive
    assert not any(o is alive for o in gc.get_objects())
    assert alive == {"kept": [1, 2]}
    later = {"made": ["after"]}
    assert any(o is later for o in gc.get_objects())  # what comes after is collected as usual


def test_zero_leaves_the_collector_as_it_is(collector: None) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()

    assert process.tune_collector(0) is False

    assert (gc.get_threshold(), gc.get_freeze_count()) == before


def test_the_settings_default_to_auto_and_20000_and_refuse_what_they_do_not_know() -> None:
    config = from_mapping({}, env={})
    assert (config.event_loop, config.gc_threshold) == ("auto", 20_000)
    assert from_mapping({}, env={"WIGGLE_GC_THRESHOLD": "0"}).gc_threshold == 0
    assert from_mapping({"event_loop": "asyncio"}, env={}).event_loop == "asyncio"
    with pytest.raises(InvalidArgument, match="WIGGLE_GC_THRESHOLD"):
        from_mapping({}, env={"WIGGLE_GC_THRESHOLD": "-1"})
    with pytest.raises(
        InvalidArgument, match="WIGGLE_EVENT_LOOP must be auto, asyncio or uvloop, not 'trio'"
    ):
        from_mapping({}, env={"WIGGLE_EVENT_LOOP": "trio"})


async def _loop_kind() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_picks_uvloop_where_installed_and_asyncio_s_loop_when_asked() -> None:
    assert _loop.run(_loop_kind(), "auto") == "uvloop"
    assert _loop.run(_loop_kind(), "uvloop") == "uvloop"
    assert _loop.run(_loop_kind(), "asyncio") == "asyncio"


def test_without_uvloop_auto_runs_asyncio_s_loop_and_uvloop_is_refused_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert _loop.run(_loop_kind(), "auto") == "asyncio"
    ran: list[bool] = []

    async def main() -> None:
        ran.append(True)

    with pytest.raises(
        InvalidArgument,
        match=r"WIGGLE_EVENT_LOOP is uvloop, but uvloop is not installed: pip install 'wiggle-workflows\[uvloop\]'",
    ):
        _loop.run(main(), "uvloop")
    assert ran == []


def _serve(extra_env: dict[str, str]) -> str:
    """Run ``wiggle server`` as a user does, read its start-up log's process line, stop it with
    SIGTERM (a graceful stop, exit 0); the line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    env.update(extra_env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "wiggle.cli", "server", "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        for line in proc.stderr:
            if "process: " in line:
                break
            assert time.monotonic() < deadline, "no process line in the server's log"
        else:
            raise AssertionError(f"the server ended without its process line (exit {proc.wait()})")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        return line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_wiggle_server_process_runs_on_uvloop_with_its_collector_set() -> None:
    line = _serve({})

    found = re.search(
        r"event loop (\w+); garbage collector: young collections every (\d+) allocations, (\d+)", line
    )
    assert found, line
    assert found.group(1, 2) == ("uvloop", "20000")
    assert int(found.group(3)) > 10_000  # the modules, descriptors and tables loaded at start-up


def test_a_server_process_asked_for_asyncio_and_zero_keeps_python_s_loop_and_collector() -> None:
    line = _serve({"WIGGLE_EVENT_LOOP": "asyncio", "WIGGLE_GC_THRESHOLD": "0"})

    assert (
        "event loop asyncio; garbage collector: young collections every 700 allocations, 0 start-up" in line
    )
