"""The command line's table of bad input: every verb, given something wrong, exits with the
documented code (README, "The command line": 2 bad input, 3 not found, 4 refused by the state, 5
unreachable, 6 still running at --timeout) and says what is wrong in ONE line on stderr, with no
traceback and nothing on stdout.

Each row runs `wiggle` as a user does (a process) against a real `wiggle server` on a loopback
port; "closed" is a local port nobody listens on.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle import Client, Workflow

MISSING_ID = "wi-000000000000000000000000"


def _parked(ctx: dict) -> dict:
    return ctx


#: its one step waits on a queue nobody serves: its instances stay RUNNING
PARKED = Workflow.define("cli-table-parked").step(_parked, queue="cli-table-nobody").build()


class Setup:
    """A server with PARKED registered, a running and a cancelled instance, a schedule, files."""

    def __init__(self, folder: Path) -> None:
        self.server = ServerProcess(folder / "server.log", server_env(WIGGLE_HTTP_PORT="0"))
        with Client(self.server.target) as client:
            client.register(PARKED)
            self.running = client.start(PARKED.name, {}).instance_id
            self.finished = client.start(PARKED.name, {}).instance_id
            client.cancel(self.finished, "for the table")
            client.create_schedule("cli-table-sched", PARKED.name, every=3600, paused=True)
        self.bad_jsonl = folder / "bad.jsonl"
        self.bad_jsonl.write_text('{"n": 1}\n[2]\n')
        self.missing = folder / "no-such-file.json"
        self.closed = f"127.0.0.1:{free_port()}"  # a local port nobody listens on


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    s = Setup(tmp_path_factory.mktemp("cli-table"))
    try:
        yield s
    finally:
        s.server.stop()


# (name, argv with {placeholders}, exit code, a fragment the one line must contain, target: "server" or "closed")
TABLE = [
    # server, migrate, demo, worker: refused before they start anything
    ("server port in use", ["server", "--port", "{port}"], 4, "the port is in use", None),
    ("server bound out of range", ["server", "--lease-millis", "-5"], 2, "--lease-millis", None),
    ("server bad mode", ["server", "--execution-mode", "FAST"], 2, "execution mode 'FAST'", None),
    ("migrate without a database", ["migrate"], 2, "--database-url", None),
    ("demo bad mode", ["demo", "--mode", "fast"], 2, "invalid choice: 'FAST'", None),
    ("demo bad count", ["demo", "--instances", "many"], 2, "invalid int value: 'many'", None),
    ("worker bad import path", ["worker", "no_such_module_here:flows"], 2, "cannot import", None),
    ("worker without blueprints", ["worker"], 2, "name the blueprints", None),
    # start
    ("start unknown workflow", ["start", "no-such-workflow"], 3, "'no-such-workflow' is not registered", "server"),
    ("start context not JSON", ["start", PARKED.name, "--context", "{oops"], 2, "--context is not valid JSON", None),
    ("start context not an object", ["start", PARKED.name, "--context", "[1]"], 2, "context must be a dict (a JSON object)", "server"),
    ("start context @missing-file", ["start", PARKED.name, "--context", "@{missing}"], 2, "no-such-file.json", None),
    ("start bad --from-file line", ["start", PARKED.name, "--from-file", "{bad_jsonl}"], 2, "line 2 must be a JSON object", None),
    ("start missing --from-file", ["start", PARKED.name, "--from-file", "{missing}"], 2, "no-such-file.json", None),
    ("start --wait times out", ["start", PARKED.name, "--wait", "--timeout", "0.5"], 6, "still RUNNING after --timeout", "server"),
    ("start bad --timeout", ["start", PARKED.name, "--timeout", "soon"], 2, "must be a number of seconds, got 'soon'", None),
    # the verbs on one instance
    ("get unknown id", ["get", MISSING_ID], 3, f"instance {MISSING_ID} does not exist", "server"),
    ("get unreachable server", ["get", MISSING_ID], 5, "is a `wiggle server` running at {closed}?", "closed"),
    ("get without an id", ["get"], 2, "required: instance_id", None),
    ("history unknown id", ["history", MISSING_ID], 3, "does not exist", "server"),
    ("cancel unknown id", ["cancel", MISSING_ID], 3, "does not exist", "server"),
    ("cancel a finished instance", ["cancel", "{finished}"], 4, "already CANCELLED; nothing changed", "server"),
    ("complete-task unknown id", ["complete-task", MISSING_ID, "approve"], 3, "does not exist", "server"),
    ("complete-task bad data", ["complete-task", "{running}", "approve", "--data", "{x"], 2, "--data is not valid JSON", "server"),
    ("complete-task not waiting", ["complete-task", "{running}", "approve"], 3, "approve", "server"),
    ("signal unknown id", ["signal", MISSING_ID, "go"], 3, "does not exist", "server"),
    ("signal data @missing-file", ["signal", "{running}", "go", "--data", "@{missing}"], 2, "no-such-file.json", "server"),
    ("retry unknown id", ["retry", MISSING_ID], 3, "does not exist", "server"),
    ("retry a running instance", ["retry", "{running}"], 4, "RUNNING", "server"),
    ("retry context @missing-file", ["retry", "{running}", "--context", "@{missing}"], 2, "no-such-file.json", "server"),
    # list
    ("list bad status", ["list", "--status", "sleeping"], 2, "invalid choice: 'SLEEPING'", None),
    ("list bad page size", ["list", "--page-size", "5000"], 2, "--page-size: must be from 1 to 1000", "server"),
    ("list unreachable server", ["list"], 5, "UNAVAILABLE", "closed"),
    # schedules
    ("schedule create bad cron", ["schedule", "create", "s1", PARKED.name, "--cron", "bad"], 2, "cron expression 'bad'", "server"),
    ("schedule create no timing", ["schedule", "create", "s1", PARKED.name], 2, "exactly one of --every SECONDS and --cron EXPR", None),
    ("schedule create every 0", ["schedule", "create", "s1", PARKED.name, "--every", "0"], 2, "--every must be more than 0 seconds, got '0'", None),
    ("schedule update every 0", ["schedule", "update", "cli-table-sched", "--every", "0s"], 2, "--every must be more than 0 seconds, got '0s'", "server"),
    ("schedule create unknown workflow", ["schedule", "create", "s1", "no-such-workflow", "--every", "60"], 3, "not registered", "server"),
    ("schedule update unknown id", ["schedule", "update", "no-such-schedule", "--every", "5"], 3, "schedule 'no-such-schedule' does not exist", "server"),
    ("schedule update both timings", ["schedule", "update", "cli-table-sched", "--every", "5", "--cron", "* * * * *"], 2, "at most one of --every", "server"),
    ("schedule update two workflows", ["schedule", "update", "cli-table-sched", "a", "--workflow", "b"], 2, "two workflows given", None),
    ("schedule update bad overlap", ["schedule", "update", "cli-table-sched", "--overlap", "never"], 2, "invalid choice: 'NEVER'", None),
    ("schedule get unknown id", ["schedule", "get", "no-such-schedule"], 3, "does not exist", "server"),
    ("schedule pause unknown id", ["schedule", "pause", "no-such-schedule"], 3, "does not exist", "server"),
    ("schedule resume unknown id", ["schedule", "resume", "no-such-schedule"], 3, "does not exist", "server"),
    ("schedule delete unknown id", ["schedule", "delete", "no-such-schedule"], 3, "does not exist", "server"),
    ("schedule trigger unknown id", ["schedule", "trigger", "no-such-schedule"], 3, "does not exist", "server"),
    ("schedule list unreachable", ["schedule", "list"], 5, "UNAVAILABLE", "closed"),
    ("schedule without a verb", ["schedule"], 2, "required: verb", None),
    # operator verbs
    ("token bad role", ["token", "alice", "--role", "root"], 2, "invalid choice: 'root'", None),
    ("ready without a port", ["ready"], 2, "give --url, or the server's --http-port", None),
    ("ready nothing answers", ["ready", "--http-port", "{closed_port}"], 5, "no answer from http://127.0.0.1:", None),
    ("ready bad url", ["ready", "--url", "ftp://x/readyz"], 2, "--url must be an http:// or https:// URL", None),
    ("workflows unreachable", ["workflows"], 5, "UNAVAILABLE", "closed"),
    ("queues unreachable", ["queues"], 5, "UNAVAILABLE", "closed"),
    ("describe unknown workflow", ["describe", "no-such-workflow"], 3, "'no-such-workflow' is not registered", "server"),
    ("describe unknown version", ["describe", PARKED.name, "--version", "nope"], 3, "nope", "server"),
    ("completion unknown shell", ["completion", "tcsh"], 2, "invalid choice: 'tcsh'", None),
    ("bench bad argument", ["bench", "--bogus"], 2, "unrecognized arguments: --bogus", None),
    ("an unknown verb", ["frobnicate"], 2, "invalid choice: 'frobnicate'", None),
]  # fmt: skip

#: gRPC core's own log lines ("E1202 08:12:21.390978 ... add_port.cc:83] ...") are not ours
_GRPC_LOG = re.compile(r"[EWI]\d{4} \d\d:\d\d:\d\d")


@pytest.mark.parametrize("name, argv, code, fragment, target", TABLE, ids=[row[0] for row in TABLE])
def test_bad_input(
    setup: Setup, name: str, argv: list[str], code: int, fragment: str, target: str | None
) -> None:
    values = {
        "port": setup.server.target.rsplit(":", 1)[1],
        "missing": str(setup.missing),
        "bad_jsonl": str(setup.bad_jsonl),
        "running": setup.running,
        "finished": setup.finished,
        "closed": setup.closed,
        "closed_port": setup.closed.rsplit(":", 1)[1],
    }

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        return text

    filled = [fill(arg) for arg in argv]
    fragment = fill(fragment)
    # never the given environment's WIGGLE_* (a WIGGLE_DATABASE_URL would make `migrate` run)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    prefix = ["--target", setup.server.target if target == "server" else setup.closed]
    done = subprocess.run([*WIGGLE, *prefix, *filled], capture_output=True, text=True, env=env, timeout=120)
    lines = [line for line in done.stderr.strip().splitlines() if not _GRPC_LOG.match(line)]
    assert done.returncode == code, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, f"{name}: stderr is not one line:\n{done.stderr}"
    assert fragment in lines[0], f"{name}: {fragment!r} not in {lines[0]!r}"
    if code != 6:  # start --wait prints the instance it waited for, then says it is still running
        assert done.stdout == "", done.stdout


def test_doctor_on_an_unreachable_server_says_which_check_failed(setup: Setup) -> None:
    """doctor's answer is its table (stdout), exit 1 when a check fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    done = subprocess.run(
        [*WIGGLE, "--target", setup.closed, "doctor"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (server_line,) = [line for line in done.stdout.splitlines() if line.startswith("server ")]
    assert " NO " in server_line, done.stdout
