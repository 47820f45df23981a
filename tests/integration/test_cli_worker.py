"""`wiggle worker`, as a user runs it: blueprints by import path, options and variables, several
processes, a graceful drain on SIGTERM; bad input as exit 2 and one line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import children_of, gone
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle import Client, TokenStatus, cli

FLOWS = textwrap.dedent(
    """
    import pathlib
    import time
    from wiggle import Workflow

    def slow(ctx):
        if ctx.get("nap"):
            pathlib.Path("napping").touch()  # the handler runs (a token's RUNNING only says it is claimed)
        time.sleep(ctx.get("nap", 0))
        return {**ctx, "slow": True}

    def fast(ctx):
        return {**ctx, "fast": True}

    napping = Workflow.define("cli-worker-nap").step(slow).step(fast, queue="cli-worker-other").build()
    ALL = [napping]
    not_a_blueprint = 42
    """
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "cli_worker_flows.py").write_text(FLOWS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_worker_flows", raising=False)
    return tmp_path


@pytest.mark.parametrize(
    "argv, env, fragment",
    [
        (["no_such_module_here:x"], {}, "cannot import 'no_such_module_here'"),
        # a dotted path or a file where module:attribute was meant: the error says how to write it
        (
            ["cli_worker_flows.napping"],
            {},
            "blueprints are given as module:attribute (e.g. cli_worker_flows:napping), the module "
            "imported from the current folder or one given with --path (WIGGLE_WORKER_PATH)",
        ),
        (
            ["cli_worker_flows.py"],
            {},
            "(e.g. cli_worker_flows:NAME, or cli_worker_flows alone for every Blueprint in it)",
        ),
        (["cli_worker_flows:missing"], {}, "has no attribute 'missing'"),
        (["cli_worker_flows:nappin"], {}, "has no attribute 'nappin' (did you mean 'napping'?)"),
        (["cli_worker_flows:not_a_blueprint"], {}, "is a int, not a Blueprint"),
        ([":napping"], {}, "names no module"),
        (["cli_worker_flows:ALL", "--concurrency", "0"], {}, "concurrency must be >= 1"),
        (
            ["cli_worker_flows:ALL"],
            {"WIGGLE_WORKER_CONCURRENCY": "many"},
            "WIGGLE_WORKER_CONCURRENCY must be an integer",
        ),
        (["cli_worker_flows:ALL"], {"WIGGLE_WORKER_USE_LOCAL_MODES": "maybe"}, "must be true or false"),
        (["cli_worker_flows:ALL", "--processes", "0"], {}, "--processes must be 1 or more"),
        # a token without TLS: a traceback before (the docs trial)
        (["cli_worker_flows:ALL"], {"WIGGLE_TOKEN": "t0ken"}, "a token is only sent over TLS"),
    ],
)
def test_bad_input_is_exit_2_and_one_line(
    app: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    fragment: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # refused before anything connects: the target is a closed port
    assert cli.main(["--target", "127.0.0.1:1", "worker", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "INVALID_ARGUMENT" in err and fragment in err, err


def test_options_then_variables_then_defaults(app: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wiggle._cli.worker import options_from

    parser = cli.build_parser()
    monkeypatch.setenv("WIGGLE_WORKER_CONCURRENCY", "7")
    monkeypatch.setenv("WIGGLE_WORKER_QUEUES", "a, b")
    monkeypatch.setenv("WIGGLE_WORKER_USE_LOCAL_MODES", "false")
    args = parser.parse_args(["worker", "m:x", "--concurrency", "3", "--transport", "unary"])
    options = options_from(args)
    assert (options.concurrency, options.queues, options.use_local_modes, options.transport) == (
        3,
        ["a", "b"],
        False,
        "unary",
    )
    assert options.poll_wait_seconds == 10.0  # the default


def _serving_group(app: Path, target: str) -> subprocess.Popen[bytes]:
    """`wiggle worker --processes 2` logging to worker.log, once both processes serve."""
    env = {**os.environ, "WIGGLE_WORKER_POLL_WAIT_SECONDS": "1"}
    with open(app / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [*WIGGLE, "--target", target, "worker", "cli_worker_flows:ALL", "--processes", "2"],
            cwd=app,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while len(children_of(worker.pid)) < 2 or (app / "worker.log").read_text().count(" serving ") < 2:
        if worker.poll() is not None or time.monotonic() > deadline:
            worker.kill()
            raise AssertionError((app / "worker.log").read_text())
        time.sleep(0.1)
    return worker


@pytest.mark.timeout(120)
def test_processes_serve_and_sigterm_drains_a_running_step(app: Path) -> None:
    server = ServerProcess(app / "server.log", server_env())
    worker = None
    try:
        worker = _serving_group(app, server.target)
        with Client(server.target) as client:
            deadline = time.monotonic() + 60
            quick = [client.start("cli-worker-nap", {"n": i}).instance_id for i in range(6)]
            for iid in quick:
                assert client.wait(iid, timeout=30).status == "COMPLETED"
            # a step that runs for 2 s, then SIGTERM while it runs: it finishes, the run hands on
            napping = client.start("cli-worker-nap", {"nap": 2}).instance_id
            # wait for the handler itself: a claim whose reply is still on its way when SIGTERM comes
            # is handed back unstarted (the poller's orphans), which is right but not this test
            while not (app / "napping").exists():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert any(t.status is TokenStatus.RUNNING for t in client.get(napping).tokens)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, (app / "worker.log").read_text()
            worker = None
            info = client.get(napping)
            history = client.history(napping)
            assert info.context.get("slow") is True  # the running step finished before the exit
            assert [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"] == [
                ("slow", "COMPLETED", 1)
            ]
            (token,) = info.tokens  # handed on: ready on the other queue, nobody holds it
            assert (token.node_id, token.status, token.lease_owner) == ("fast", "READY", "")
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(30)
        server.stop()


@pytest.mark.timeout(120)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_parent_killed_outright_takes_its_processes_with_it_after_their_steps(app: Path) -> None:
    """SIGKILL to the parent passes nothing on: its processes ran on, re-parented to init, and a
    restarted group worked beside them (wiggle/_cli/parent.py). Now each drains as at SIGTERM:
    the running step finishes and is reported, nothing waits out a lease."""
    server = ServerProcess(app / "server.log", server_env())
    worker = None
    children: list[int] = []
    try:
        worker = _serving_group(app, server.target)
        children = children_of(worker.pid)
        with Client(server.target) as client:
            napping = client.start("cli-worker-nap", {"nap": 2}).instance_id
            deadline = time.monotonic() + 60
            while not (app / "napping").exists():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            worker.kill()
            worker.wait(10)
            worker = None
            while not all(gone(pid) for pid in children):
                assert time.monotonic() < deadline, (app / "worker.log").read_text()
                time.sleep(0.05)
            info = client.get(napping)
            history = client.history(napping)
            assert info.context.get("slow") is True, (app / "worker.log").read_text()
            assert [(h.node_id, h.outcome, h.attempt) for h in history if h.kind == "TASK"] == [
                ("slow", "COMPLETED", 1)
            ]
            (token,) = info.tokens  # handed on at the drain, not held until a lease expires
            assert (token.node_id, token.status, token.lease_owner) == ("fast", "READY", "")
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if worker is not None:
            worker.kill()
            worker.wait(30)
        server.stop()


@pytest.mark.timeout(60)
def test_sigterm_while_the_processes_start_is_a_clean_stop(app: Path) -> None:
    # whether a child is still importing (stopped by the signal itself) or already serving
    # (drained), stopping as asked is exit 0
    server = ServerProcess(app / "server.log", server_env())
    try:
        worker = subprocess.Popen(
            [*WIGGLE, "--target", server.target, "worker", "cli_worker_flows:ALL", "--processes", "2"],
            cwd=app,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while len(children_of(worker.pid)) < 2:
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        server.stop()


@pytest.mark.timeout(150)
def test_processes_given_a_worker_id_are_named_apart(app: Path) -> None:
    # `--worker-id X --processes N` (or WIGGLE_WORKER_WORKER_ID): process i is X-i; without an id
    # each process names itself (host, pid, random suffix), so they differ too
    server = ServerProcess(app / "server.log", server_env())
    workers: list[subprocess.Popen[bytes]] = []
    command = [*WIGGLE, "--target", server.target, "worker", "cli_worker_flows:ALL", "--processes", "2"]
    try:
        for argv, env in [
            (["--worker-id", "by-flag"], {}),
            ([], {"WIGGLE_WORKER_WORKER_ID": "by-var"}),
            ([], {}),
        ]:
            workers.append(
                subprocess.Popen(
                    [*command, *argv],
                    cwd=app,
                    env={**os.environ, "WIGGLE_WORKER_POLL_WAIT_SECONDS": "1", **env},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        with Client(server.target) as client:
            deadline = time.monotonic() + 90
            while True:
                seen = {
                    w.worker_id for q in client.queues() if q.queue == "cli-worker-nap" for w in q.workers
                }
                if len(seen) >= 6 or time.monotonic() > deadline:
                    break
                assert all(w.poll() is None for w in workers), [w.returncode for w in workers]
                time.sleep(0.2)
        assert {"by-flag-0", "by-flag-1", "by-var-0", "by-var-1"} <= seen, seen
        unnamed = seen - {"by-flag-0", "by-flag-1", "by-var-0", "by-var-1"}
        assert len(unnamed) == 2, seen  # two processes, two default ids
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        assert [worker.wait(30) for worker in workers] == [0, 0, 0]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(30)
        server.stop()


@pytest.mark.timeout(150)
def test_a_worker_process_that_dies_is_logged_and_started_again(app: Path) -> None:
    # An outside trial: a child of --processes 2 killed with SIGKILL was neither restarted nor
    # logged; the group ran on at half its capacity while its parent looked healthy.
    server = ServerProcess(app / "server.log", server_env())
    worker = None
    try:
        worker = _serving_group(app, server.target)
        deadline = time.monotonic() + 60
        victim = children_of(worker.pid)[0]
        os.kill(victim, signal.SIGKILL)
        while (app / "worker.log").read_text().count(" serving ") < 3:  # its replacement is up
            assert worker.poll() is None and time.monotonic() < deadline, (app / "worker.log").read_text()
            time.sleep(0.1)
        log_text = (app / "worker.log").read_text()
        assert f"(pid {victim}) was killed by signal 9" in log_text, log_text
        assert "starting another in its place" in log_text, log_text
        children = children_of(worker.pid)
        assert len(children) == 2 and victim not in children, children
        with Client(server.target) as client:
            iid = client.start("cli-worker-nap", {"n": 1}).instance_id
            assert client.wait(iid, timeout=30).status == "COMPLETED"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, (app / "worker.log").read_text()  # a stop is a stop: no restart
        worker = None
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(30)
        server.stop()


def test_a_module_with_only_a_list_of_blueprints_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wiggle worker exp` on a module whose blueprints sit in a top-level list said "defines no
    Blueprint at its top level", with no word of the list."""
    (tmp_path / "listed_flows.py").write_text(
        "from wiggle import Workflow\n"
        "def a(ctx):\n    return ctx\n"
        "FLOWS = [Workflow.define('listed-a').step(a).build()]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "listed_flows", raising=False)
    assert cli.main(["--target", "127.0.0.1:1", "worker", "listed_flows"]) == 2
    err = capsys.readouterr().err
    assert (
        "module 'listed_flows' defines no Blueprint at its top level; it has a list of them: listed_flows:FLOWS"
        in err
    )


def test_a_worker_group_whose_process_was_killed_exits_128_plus_n() -> None:
    """A process killed by signal N made the group parent return -N, which ``sys.exit`` turns
    into 256 - N (247 for SIGKILL); the shell's way is 128 + N."""
    from wiggle._cli.worker import group_status

    assert group_status([0, -signal.SIGKILL], set()) == 128 + signal.SIGKILL
    assert group_status([0, 3], set()) == 3
    # stopped by the SIGTERM passed on while it started: a stop as asked
    assert group_status([0, -signal.SIGTERM], {signal.SIGTERM}) == 0
