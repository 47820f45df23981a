"""Settings a server or a worker cannot work with, refused at start in one line; a port in use
and an unreachable database said in one line too, naming the setting to change.

Found by an outside operator trial: WIGGLE_PURGE_INTERVAL_SECONDS=0 (or -1) was taken, and the
idle server purged in a loop (~8,900 PostgreSQL commits in 5 s against 55, 35-49% of a core);
WIGGLE_RELOAD_SECONDS took -1 and 0; ``wiggle worker --poll-wait-seconds 0`` polled ~420 times a
second while idle; WIGGLE_MAX_LIVE_INSTANCES=-5 and WIGGLE_IMPL=foo were tracebacks (exit 1); a
busy --http-port was a 25-line traceback (exit 1, where a busy gRPC port is one line, exit 4);
``wiggle server`` and ``wiggle migrate`` on an unreachable database pointed at --target.
"""

from __future__ import annotations

import math
import re
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from upstream.servers import WIGGLE, ServerProcess, server_env

from wiggle import WorkerOptions, Workflow
from wiggle._cli import server as server_cli
from wiggle._cli.common import QUIET_FLAG
from wiggle._server.app import WiggleServer
from wiggle._server.config import BOUNDS, ServerConfig, database_address, without_password
from wiggle._worker.options import BOUNDS as WORKER_BOUNDS
from wiggle._worker.options import bound_text, check_options
from wiggle.errors import FailedPrecondition
from wiggle.testing import EmbeddedServer

#: gRPC core's own log lines ("E1202 08:12:21.390978 ... add_port.cc:83] ...") are not ours
_GRPC_LOG = re.compile(r"[EWI]\d{4} \d\d:\d\d:\d\d")
SECRET = "s3cret-pw"

FLOWS = textwrap.dedent(
    """
    from wiggle import Workflow

    def step(ctx):
        return ctx

    flow = Workflow.define("bad-settings").step(step).build()
    """
)


def wiggle(*argv: str, cwd: Path | None = None, **variables: str) -> subprocess.CompletedProcess[str]:
    """``wiggle ARGV`` as a user runs it, with no WIGGLE_* variable but ``variables``."""
    env = server_env(**variables)
    env.pop("WIGGLE_LEASE_MILLIS")  # server_env's own: only what the test sets
    return subprocess.run([*WIGGLE, *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refusal is: no traceback, nothing else on stderr, nothing on stdout."""
    lines = [line for line in done.stderr.strip().splitlines() if not _GRPC_LOG.match(line)]
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1, f"stderr is not one line:\n{done.stderr}"
    assert done.stdout == "", done.stdout
    return lines[0]


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's own error line (the last), after the log lines a server writes before it."""
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "bad_settings_flows.py").write_text(FLOWS)
    return tmp_path


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port held by a socket that does not listen: a connection there is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# --------------------------------------------------------------------------- server settings


def test_every_numeric_server_setting_has_bounds() -> None:
    defaults = ServerConfig()
    numeric = {
        field
        for field in ServerConfig.__struct_fields__
        if isinstance(getattr(defaults, field), (int, float))
        and not isinstance(getattr(defaults, field), bool)
    }
    assert {"purge_interval_seconds", "reload_seconds", "max_live_instances"} <= numeric
    assert numeric - set(BOUNDS) == set()
    for field in numeric:  # the default is within them
        low, high = BOUNDS[field]
        assert low <= getattr(defaults, field) <= high, field


@pytest.mark.parametrize(
    "variable, value, message",
    [
        (
            "WIGGLE_PURGE_INTERVAL_SECONDS",
            "0",
            "--purge-interval-seconds (WIGGLE_PURGE_INTERVAL_SECONDS) must be between 1 and 86400, got 0.0",
        ),
        (
            "WIGGLE_PURGE_INTERVAL_SECONDS",
            "-1",
            "--purge-interval-seconds (WIGGLE_PURGE_INTERVAL_SECONDS) must be between 1 and 86400, got -1.0",
        ),
        (
            "WIGGLE_RELOAD_SECONDS",
            "0",
            "--reload-seconds (WIGGLE_RELOAD_SECONDS) must be between 1 and 86400",
        ),
        (
            "WIGGLE_RELOAD_SECONDS",
            "-1",
            "--reload-seconds (WIGGLE_RELOAD_SECONDS) must be between 1 and 86400",
        ),
        (
            "WIGGLE_RELOAD_SECONDS",
            "nan",
            "--reload-seconds (WIGGLE_RELOAD_SECONDS) must be between 1 and 86400",
        ),
        (
            "WIGGLE_MAX_LIVE_INSTANCES",
            "-5",
            "--max-live-instances (WIGGLE_MAX_LIVE_INSTANCES) must be between 0 and 2147483648, got -5",
        ),
        ("WIGGLE_IMPL", "foo", "WIGGLE_IMPL must be one of auto, cython, python, got 'foo'"),
    ],
)
def test_a_server_setting_out_of_its_bounds_is_one_line_exit_2(
    variable: str, value: str, message: str
) -> None:
    done = wiggle("server", "--port", "0", **{variable: value})
    assert done.returncode == 2, done.stderr
    assert message in one_line(done)


def test_a_bad_wiggle_impl_is_one_line_for_every_verb(flows: Path, closed_port: int) -> None:
    for argv in (["list"], ["worker", "bad_settings_flows:flow"], ["--version"]):
        done = wiggle("--target", f"127.0.0.1:{closed_port}", *argv, cwd=flows, WIGGLE_IMPL="foo")
        assert done.returncode == 2, (argv, done.stderr)
        assert one_line(done) == "wiggle: WIGGLE_IMPL must be one of auto, cython, python, got 'foo'"


# --------------------------------------------------------------------------- worker options


def test_every_numeric_worker_option_is_bounded() -> None:
    numeric = {f.name for f in msgspec.structs.fields(WorkerOptions) if f.type in (int, float)}
    assert {"poll_wait_seconds", "concurrency", "heartbeat_seconds"} <= numeric
    # lease_margin (0 to 1, 1 excluded) and metrics_port (a port) are checked on their own
    assert numeric - set(WORKER_BOUNDS) == {"lease_margin", "metrics_port"}
    defaults = WorkerOptions()
    for name, bound in WORKER_BOUNDS.items():
        assert bound.low <= getattr(defaults, name) <= bound.high, name


def test_the_worker_bounds_are_the_servers_limits() -> None:
    from wiggle._fast.batch_py import MAX_BATCH_STEPS
    from wiggle._server.delivery import MAX_WAIT_SECONDS
    from wiggle._server.service_limits import ServiceLimits

    assert WORKER_BOUNDS["concurrency"].high == ServiceLimits().max_tasks_per_poll
    assert WORKER_BOUNDS["poll_wait_seconds"].high == MAX_WAIT_SECONDS
    assert WORKER_BOUNDS["local_batch_size"].high == MAX_BATCH_STEPS


def test_each_option_says_what_it_allows_in_the_reference() -> None:
    """docs/configuration.md's worker table is made from the docstring (scripts/gen_settings_table.py)."""
    doc = WorkerOptions.__doc__ or ""
    for name, bound in WORKER_BOUNDS.items():
        entry = re.search(rf"^ {{8}}{name}: (.*?)(?=^ {{8}}\w+: |\Z)", doc, re.M | re.S)
        assert entry, name
        assert f"Allowed: {bound_text(bound)}" in " ".join(entry.group(1).split()), name


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"poll_wait_seconds": 0.0},
            "poll_wait_seconds must be >= 0.1, got 0; allowed: 0.1 to 60",
        ),  # the trial's
        ({"poll_wait_seconds": 0.01}, "poll_wait_seconds must be >= 0.1, got 0.01"),
        ({"poll_wait_seconds": 61.0}, "poll_wait_seconds must be <= 60, got 61"),
        ({"poll_wait_seconds": math.nan}, "poll_wait_seconds must be a number, got nan"),
        ({"poll_wait_seconds": math.inf}, "poll_wait_seconds must be <= 60, got inf"),
        ({"concurrency": 257}, "concurrency must be <= 256, got 257; allowed: 1 to 256"),
        (
            {"heartbeat_seconds": 0.001},
            "heartbeat_seconds must be 0 (0: a third of the lease) or at least 0.05",
        ),
        (
            {"heartbeat_seconds": math.nan},
            "heartbeat_seconds must be a number, got nan; allowed: 0, or 0.05 to 3600",
        ),
        ({"local_batch_size": 10_001}, "local_batch_size must be <= 10000, got 10001"),
        ({"flush_interval": math.inf}, "flush_interval must be <= 3600, got inf"),
        ({"chain_steps": 100_001}, "chain_steps must be <= 100000"),
        ({"chain_seconds": math.nan}, "chain_seconds must be a number, got nan"),
        ({"drain_seconds": math.inf}, "drain_seconds must be <= 86400, got inf"),
        ({"connect_seconds": math.nan}, "connect_seconds must be a number, got nan"),
        ({"threads": 5000}, "threads must be <= 4096, got 5000"),
        ({"inline_threshold_ms": math.inf}, "inline_threshold_ms must be <= 1000, got inf"),
        ({"lease_margin": math.nan}, "lease_margin must be in [0, 1), got nan"),
    ],
)
def test_an_option_out_of_its_bounds_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        check_options(WorkerOptions(**fields))
    assert message in str(refused.value)


def test_each_bound_itself_is_allowed() -> None:
    for name, bound in WORKER_BOUNDS.items():
        kind = type(getattr(WorkerOptions(), name))
        for value in (bound.low, bound.high, bound.least or bound.low):
            check_options(WorkerOptions(**{name: kind(value)}))


async def test_a_worker_with_the_most_slots_runs_steps() -> None:
    """257 slots had every poll refused (max_tasks must be between 1 and 256) and ran nothing."""
    flow = Workflow.define("bad-settings-slots").step(lambda ctx: {**ctx, "done": True}, name="s").build()
    async with EmbeddedServer() as server:
        options = WorkerOptions(concurrency=int(WORKER_BOUNDS["concurrency"].high), poll_wait_seconds=1.0)
        async with server.worker([flow], options):
            info = await server.client.start(flow, {})
            done = await server.client.wait(info.instance_id, timeout=20)
        assert done.status == "COMPLETED" and done.context == {"done": True}


@pytest.mark.parametrize(
    "argv, variables, message",
    [
        (
            ["--poll-wait-seconds", "0"],
            {},
            "wiggle: INVALID_ARGUMENT: --poll-wait-seconds (WIGGLE_WORKER_POLL_WAIT_SECONDS): "
            "poll_wait_seconds must be >= 0.1, got 0; allowed: 0.1 to 60",
        ),
        (
            [],
            {"WIGGLE_WORKER_CONCURRENCY": "300"},
            "--concurrency (WIGGLE_WORKER_CONCURRENCY): concurrency must be <= 256, got 300; allowed: 1 to 256",
        ),
        # --queues that names no queue (empty, or commas only) stopped the command with a traceback
        # ("ValueError: the worker serves no queues", from Worker())
        (
            ["--queues", ""],
            {},
            "wiggle: INVALID_ARGUMENT: --queues (WIGGLE_WORKER_QUEUES): queues names no queue, so the "
            "worker serves no queues: give queue names, or leave queues out to serve every queue of "
            "the blueprints",
        ),
        ([], {"WIGGLE_WORKER_QUEUES": " , "}, "--queues (WIGGLE_WORKER_QUEUES): queues names no queue"),
    ],
)
def test_wiggle_worker_names_the_option_its_variable_and_what_it_allows(
    flows: Path, closed_port: int, argv: list[str], variables: dict[str, str], message: str
) -> None:
    done = wiggle(
        "--target",
        f"127.0.0.1:{closed_port}",
        "worker",
        "bad_settings_flows:flow",
        *argv,
        cwd=flows,
        **variables,
    )
    assert done.returncode == 2, done.stderr
    assert message in one_line(done)


@pytest.mark.parametrize("verb", [["worker", "bad_settings_flows:flow"], ["list"], ["doctor"]])
@pytest.mark.parametrize(
    "target, message",
    [
        ("", "no server address given"),
        (" , ", "no server address given"),
        (
            "127.0.0.1:{port},not-an-address",
            "server address 'not-an-address' has no port: add it, e.g. 'not-an-address:7233'",
        ),
        ("127.0.0.1:{port},host:port", "server address 'host:port' is not host:port"),
        (
            "http://127.0.0.1:{port}",
            "server address 'http://127.0.0.1:{port}' is a URL (http://): a target is host:port, "
            "e.g. '127.0.0.1:{port}'",
        ),
    ],
)
def test_a_target_that_names_no_server_is_one_line_naming_the_option(
    flows: Path, closed_port: int, verb: list[str], target: str, message: str
) -> None:
    """``wiggle worker --target ""`` and ``wiggle doctor`` stopped with a traceback (a ValueError
    from their client), and ``wiggle list`` said "no server address given" (exit 1) without naming
    where."""
    done = wiggle("--target", target.format(port=closed_port), *verb, cwd=flows)
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith(
        f"wiggle: INVALID_ARGUMENT: --target (WIGGLE_TARGET): {message.format(port=closed_port)}"
    ), one_line(done)


# --------------------------------------------------------------------------- ports in use


def test_a_busy_http_port_is_one_line_exit_4(busy_port: int) -> None:
    done = wiggle("server", "--port", "0", "--http-port", str(busy_port))
    assert done.returncode == 4, done.stderr
    line = one_line(done)
    assert line.startswith(
        f"wiggle: FAILED_PRECONDITION: the HTTP port cannot listen on 127.0.0.1:{busy_port}"
    )
    assert "the port is in use" in line and "--http-port, WIGGLE_HTTP_PORT" in line


async def test_a_busy_http_port_stops_the_start_with_failed_precondition(busy_port: int) -> None:
    server = WiggleServer(ServerConfig(port=0, http_port=busy_port))
    with pytest.raises(
        FailedPrecondition, match=f"cannot listen on 127.0.0.1:{busy_port}: the port is in use"
    ):
        await server.start()
    assert not server.serving()


# --------------------------------------------------------------------------- unknown variables


def test_wiggle_server_names_an_unknown_variable_at_start(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server.log", server_env(WIGGLE_LEASE_MILLI="5"))
    try:
        text = server.text()
    finally:
        server.stop()
    warning = (
        "WIGGLE_LEASE_MILLI is not a variable Wiggle reads; it is ignored (did you mean WIGGLE_LEASE_MILLIS?)"
    )
    assert text.count(warning) == 1, text
    assert "WIGGLE_HOST is not" not in text  # a variable it reads is never named


@pytest.mark.parametrize("processes", ["1", "2"])
def test_wiggle_worker_names_an_unknown_variable_once(flows: Path, closed_port: int, processes: str) -> None:
    target = f"127.0.0.1:{closed_port}"
    done = wiggle(
        "--target",
        target,
        "worker",
        "bad_settings_flows:flow",
        "--connect-seconds",
        "0",
        "--processes",
        processes,
        cwd=flows,
        WIGGLE_WORKER_CONCURENCY="4",
    )
    assert done.returncode == 5, done.stderr  # no server there: it stops after its one try
    warning = (
        "WIGGLE_WORKER_CONCURENCY is not a variable Wiggle reads; it is ignored "
        "(did you mean WIGGLE_WORKER_CONCURRENCY?)"
    )
    assert done.stderr.count(warning) == 1, done.stderr  # the parent's, not one per process


def test_the_servers_processes_are_told_not_to_warn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    class Child:
        returncode = 0

        def __init__(self, argv: list[str], env: dict[str, str]) -> None:
            started.append(argv)

        def poll(self) -> int:
            return 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(server_cli.subprocess, "Popen", Child)
    monkeypatch.setattr(server_cli.sys, "argv", ["wiggle", "server", "--processes", "2"])
    assert server_cli._run_processes(2) == 0
    assert len(started) == 2 and all(argv[-1] == QUIET_FLAG for argv in started)


def test_the_quiet_flag_is_no_documented_option() -> None:
    for verb in ("server", "worker"):
        done = subprocess.run([*WIGGLE, verb, "--help"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and QUIET_FLAG not in done.stdout


# --------------------------------------------------------------------------- an unreachable database


@pytest.mark.parametrize("verb", [["server", "--port", "0"], ["migrate"]])
def test_an_unreachable_database_names_it_not_the_target(verb: list[str], closed_port: int) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{closed_port}/wiggle_db"
    done = wiggle(*verb, "--database-url", url)
    assert done.returncode == 5, done.stderr
    line = last_line(done)
    assert line.startswith("wiggle: UNAVAILABLE: database unavailable"), line
    assert line.endswith(
        f"(is PostgreSQL running at postgres@127.0.0.1:{closed_port}/wiggle_db? "
        "Choose another with --database-url or WIGGLE_DATABASE_URL)"
    ), line
    assert "--target" not in line and "WIGGLE_TARGET" not in line and "wiggle server` running" not in line
    assert SECRET not in done.stderr


def test_the_variable_is_named_alike(closed_port: int) -> None:
    done = wiggle(
        "migrate", WIGGLE_DATABASE_URL=f"host=127.0.0.1 port={closed_port} user=w password={SECRET} dbname=q"
    )
    assert done.returncode == 5, done.stderr
    assert last_line(done).endswith(
        f"(is PostgreSQL running at w@127.0.0.1:{closed_port}/q? Choose another with --database-url or WIGGLE_DATABASE_URL)"
    )
    assert SECRET not in done.stderr


def test_a_url_quoted_in_a_refusal_loses_its_password() -> None:
    done = wiggle("server", "--port", "0", "--database-url", f"mysql://u:{SECRET}@db/x")
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert "mysql://u:****@db/x" in line and SECRET not in line


@pytest.mark.parametrize(
    "url, address, shown",
    [
        ("postgresql://u:pw@h:5433/db", "u@h:5433/db", "postgresql://u:****@h:5433/db"),
        ("postgresql://u:pw@a:5432,b:5433/db?sslmode=require", "u@a:5432,b:5433/db", None),
        ("postgresql://h/db?password=pw", "h/db", "postgresql://h/db?password=****"),
        (
            "host=a,b port=5432 user=u password='p w' dbname=db",
            "u@a:5432,b:5432/db",
            "host=a,b port=5432 user=u password=**** dbname=db",
        ),
        ("postgresql:///db", "[local]/db", "postgresql:///db"),
        ("postgresql://u@h/db", "u@h/db", "postgresql://u@h/db"),
    ],
)
def test_the_address_and_the_url_without_a_password(url: str, address: str, shown: str | None) -> None:
    assert database_address(url) == address
    if shown is not None:
        assert without_password(url) == shown
    assert "pw" not in database_address(url).replace("postgresql", "")
