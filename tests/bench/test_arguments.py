"""The benchmark's argument parsing: defaults from the environment, validation, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from wiggle._bench.arguments import MODES, parse_args
from wiggle._bench.deploy import ModeProcesses
from wiggle._bench.e2e import main
from wiggle._bench.processes import Children

CLEAN = (
    "WIGGLE_EXECUTION_MODE",
    "WIGGLE_BENCH_STEPS",
    "WIGGLE_BENCH_INSTANCES",
    "WIGGLE_BENCH_WORKERS",
    "WIGGLE_BENCH_CONCURRENCY",
    "WIGGLE_LOCAL_BATCH_SIZE",
    "WIGGLE_BENCH_TRANSPORT",
    "WIGGLE_BENCH_HANDLER",
    "WIGGLE_DATABASE_URL",
    "WIGGLE_BENCH_TIMEOUT",
    "WIGGLE_BENCH_SUBMIT",
    "WIGGLE_BENCH_SUBMIT_THREADS",
    "WIGGLE_BENCH_SERVERS",
    "WIGGLE_BENCH_SUBMIT_RATE",
    "WIGGLE_BENCH_SUBMIT_TO",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)


def test_defaults() -> None:
    args = parse_args([])
    assert args.modes == list(MODES)
    assert (args.steps, args.instances, args.workers, args.concurrency) == (20, 1000, 4, 16)
    assert (args.batch_size, args.transport, args.handler) == (64, "stream", "sync")
    assert args.database_url == "" and args.impl is None and args.timeout == 600
    assert not args.json and not args.keep and args.fault == ""
    assert args.submit == ["before"] and args.submit_threads == 8
    assert args.latency is None and args.servers == 1 and not args.front
    assert args.submit_rate == 0.0 and args.submit_to == "first"


def test_paced_and_spread_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse_args(["--submit", "during", "--submit-rate", "2.5", "--submit-to", "all"])
    assert args.submit_rate == 2.5 and args.submit_to == "all"
    assert parse_args(["--submit", "before,during", "--submit-rate", "9"]).submit_rate == 9.0
    monkeypatch.setenv("WIGGLE_BENCH_SUBMIT_RATE", "120")
    monkeypatch.setenv("WIGGLE_BENCH_SUBMIT_TO", "all")
    args = parse_args(["--submit", "during"])
    assert args.submit_rate == 120.0 and args.submit_to == "all"
    monkeypatch.setenv("WIGGLE_BENCH_SUBMIT_RATE", "-1")
    with pytest.raises(SystemExit, match="WIGGLE_BENCH_SUBMIT_RATE must be a finite number >= 0, got -1.0"):
        parse_args(["--submit", "during"])


def test_latency_mode_defaults_to_five_steps_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse_args(["--latency", "100"])
    assert args.latency == 100 and args.steps == 5
    assert parse_args(["--latency", "100", "--steps", "8"]).steps == 8
    monkeypatch.setenv("WIGGLE_BENCH_STEPS", "7")
    assert parse_args(["--latency", "100"]).steps == 7


def test_submit_modes_run_before_then_during(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_args(["--submit", "during"]).submit == ["during"]
    assert parse_args(["--submit", "During, before"]).submit == ["before", "during"]
    assert parse_args(["--submit", "before,before"]).submit == ["before"]
    monkeypatch.setenv("WIGGLE_BENCH_SUBMIT", "during")
    monkeypatch.setenv("WIGGLE_BENCH_SUBMIT_THREADS", "3")
    args = parse_args([])
    assert args.submit == ["during"] and args.submit_threads == 3


def test_environment_gives_the_defaults_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIGGLE_EXECUTION_MODE", "local_async")
    monkeypatch.setenv("WIGGLE_BENCH_STEPS", "7")
    monkeypatch.setenv("WIGGLE_BENCH_INSTANCES", "33")
    monkeypatch.setenv("WIGGLE_BENCH_TRANSPORT", "unary")
    args = parse_args([])
    assert args.modes == ["LOCAL_ASYNC"]
    assert (args.steps, args.instances, args.transport) == (7, 33, "unary")
    args = parse_args(["--steps", "3", "--modes", "server, local_sync"])
    assert args.steps == 3 and args.modes == ["SERVER", "LOCAL_SYNC"]


def test_a_malformed_environment_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIGGLE_BENCH_WORKERS", "four")
    with pytest.raises(SystemExit, match="WIGGLE_BENCH_WORKERS must be an integer, got 'four'"):
        parse_args([])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--modes", "DEFAULT"], "not one of"),
        (["--modes", ","], "no mode given"),
        (["--steps", "0"], "must be >= 1"),
        (["--instances", "x"], "is not an integer"),
        (["--transport", "carrier-pigeon"], "invalid choice"),
        (["--submit", "after"], "submit mode 'after' is not one of before, during"),
        (["--submit", ""], "no submit mode given"),
        (["--submit-threads", "0"], "must be >= 1"),
        (["--latency", "0"], "must be >= 1"),
        (["--submit-rate", "fast"], "'fast' is not a number"),
        (["--submit-rate", "-3"], "must be a finite number >= 0"),
        (["--submit-rate", "inf"], "must be a finite number >= 0"),
        (["--submit-to", "some"], "invalid choice"),
    ],
)
def test_bad_flags_exit_2_and_say_why(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--timeout", "0"], "--timeout must be > 0"),
        (["--database-url", "mysql://x"], "postgresql:// URL"),
        (["--latency", "5", "--submit", "during"], "--submit does not apply"),
        (["--servers", "2"], "--servers > 1 needs PostgreSQL"),
        (["--servers", "2", "--latency", "5", "--database-url", "postgresql://x"], "not to --latency"),
        (["--front", "--database-url", "postgresql://x"], "--front needs --servers 2 or more"),
        (["--submit-rate", "50"], "--submit-rate paces the starts of --submit during"),
        (
            ["--servers", "3", "--front", "--submit-to", "all", "--database-url", "postgresql://x"],
            "--front keeps the starts on the first server",
        ),
    ],
)
def test_inconsistent_settings_exit_2(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err


def test_help_exits_0_and_a_leading_separator_is_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--", "--help"]) == 0
    assert "--instances" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--servers", "2"], ["a", "b", "a", "b"]),  # worker i on server i mod N
        (["--servers", "2", "--front"], ["b", "b", "b", "b"]),  # the first server keeps the clients
        (["--servers", "3", "--front"], ["b", "c", "b", "c"]),
    ],
)
def test_workers_go_to_the_servers_the_front_leaves_them(
    argv: list[str], expected: list[str], tmp_path: Path
) -> None:
    args = parse_args([*argv, "--database-url", "postgresql://x"])
    procs = ModeProcesses(args, "SERVER", "t", Children(tmp_path, {}), None, "")
    procs.targets = ["a", "b", "c"][: args.servers]
    assert [procs.worker_target(i) for i in range(4)] == expected
