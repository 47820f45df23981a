"""The loop a worker runs on (wiggle/_loop.py): ``wiggle worker`` (``Worker.run()``) runs on uvloop
where it is installed and on asyncio's loop when ``WIGGLE_WORKER_EVENT_LOOP=asyncio`` asks; a step
sees which. ``await worker.run_async()`` keeps its caller's loop; an unknown loop is refused by
name."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle import Client, Worker, WorkerOptions, Workflow, cli
from wiggle.errors import InvalidArgument
from wiggle.testing import EmbeddedServer

FLOWS = textwrap.dedent(
    """
    import asyncio
    from wiggle import Workflow

    async def which_loop(ctx):
        return {**ctx, "loop": type(asyncio.get_running_loop()).__module__.split(".")[0]}

    ALL = [Workflow.define("worker-loop").step(which_loop).build()]
    """
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "worker_loop_flows.py").write_text(FLOWS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _loop_of_a_step(app: Path, server: ServerProcess, extra_env: dict[str, str]) -> str:
    """Run ``wiggle worker`` as a user does, run one instance through it, stop the worker with
    SIGTERM (a drain, exit 0); the loop the step saw."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_WORKER_")}
    env.update(extra_env)
    worker = subprocess.Popen(
        [*WIGGLE, "--target", server.target, "worker", "worker_loop_flows:ALL"],
        cwd=app,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Client(server.target) as client:
            deadline = time.monotonic() + 60
            while True:  # the worker registers the workflow when it is up
                try:
                    iid = client.start("worker-loop", {}).instance_id
                    break
                except Exception:
                    assert worker.poll() is None and time.monotonic() < deadline
                    time.sleep(0.1)
            info = client.wait(iid, timeout=30)
            assert info.status == "COMPLETED"
            assert [h.outcome for h in client.history(iid) if h.kind == "TASK"] == ["COMPLETED"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        return str(info.context["loop"])
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)


@pytest.mark.timeout(120)
def test_wiggle_worker_runs_on_uvloop_where_installed_and_on_asyncio_s_loop_when_asked(app: Path) -> None:
    server = ServerProcess(app / "server.log", server_env())
    try:
        assert _loop_of_a_step(app, server, {}) == "uvloop"  # the test extra installs uvloop
        assert _loop_of_a_step(app, server, {"WIGGLE_WORKER_EVENT_LOOP": "asyncio"}) == "asyncio"
    finally:
        server.stop()


async def _which_loop(ctx: dict[str, str]) -> dict[str, str]:
    return {**ctx, "loop": type(asyncio.get_running_loop()).__module__.split(".")[0]}


async def test_a_worker_awaited_with_run_async_keeps_its_caller_s_loop() -> None:
    flow = Workflow.define("worker-loop-async").step(_which_loop).build()
    async with EmbeddedServer() as server:
        worker = Worker(server.target, [flow], WorkerOptions(event_loop="uvloop"))
        task = asyncio.ensure_future(worker.run_async())
        try:
            client = server.client
            await client.register(flow)
            iid = (await client.start("worker-loop-async", {})).instance_id
            info = await client.wait(iid, timeout=30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await worker.close()
    assert info.context["loop"] == type(asyncio.get_running_loop()).__module__.split(".")[0] == "asyncio"


def test_an_unknown_loop_is_refused_by_name(
    app: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = Workflow.define("worker-loop-refused").step(_which_loop).build()
    with pytest.raises(ValueError, match="event_loop must be 'auto', 'asyncio' or 'uvloop', got 'trio'"):
        Worker("127.0.0.1:1", [flow], WorkerOptions(event_loop="trio"))
    # the command says it in one line, exit 2, before connecting (the target is a closed port)
    monkeypatch.delenv("WIGGLE_WORKER_EVENT_LOOP", raising=False)
    monkeypatch.delitem(sys.modules, "worker_loop_flows", raising=False)
    assert (
        cli.main(["--target", "127.0.0.1:1", "worker", "worker_loop_flows:ALL", "--event-loop", "trio"]) == 2
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "INVALID_ARGUMENT" in err and "event_loop must be" in err, (
        err
    )


def test_a_worker_asked_for_uvloop_without_it_is_refused_naming_the_option_and_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    flow = Workflow.define("worker-loop-missing").step(_which_loop).build()
    worker = Worker("127.0.0.1:1", [flow], WorkerOptions(event_loop="uvloop"))
    with pytest.raises(
        InvalidArgument,
        match=r"WorkerOptions.event_loop \(WIGGLE_WORKER_EVENT_LOOP\) is uvloop, but uvloop is not installed: "
        r"pip install 'wiggle-workflows\[uvloop\]'",
    ):
        worker.run()
