"""WorkerOptions: checked in one place, with messages that name the option and what it accepts."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from wiggle import Worker, WorkerOptions, Workflow
from wiggle._env import EnvError
from wiggle._worker.options import check_options


def step(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


BP = Workflow.define("opts").step(step).build()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"concurrency": 0}, "concurrency must be >= 1, got 0"),
        ({"local_batch_size": 0}, r"local_batch_size must be >= 1, got 0 \(check WIGGLE_LOCAL_BATCH_SIZE"),
        ({"transport": "pigeon"}, "transport must be 'stream' or 'unary', got 'pigeon'"),
        (
            {"sync_handlers": "sometimes"},
            "sync_handlers must be 'auto', 'thread' or 'inline', got 'sometimes'",
        ),
        ({"threads": -1}, "threads must be >= 0"),
        ({"poll_wait_seconds": -1.0}, "poll_wait_seconds must be >= 0"),
        ({"heartbeat_seconds": -1.0}, "heartbeat_seconds must be >= 0"),
        ({"chain_steps": -1}, r"chain_steps must be >= 0 \(0: every step is polled for\), got -1"),
        ({"chain_seconds": -0.5}, r"chain_seconds must be >= 0 \(0: no time bound\), got -0.5"),
        ({"flush_interval": -0.5}, "flush_interval must be >= 0"),
        ({"lease_margin": 1.0}, r"lease_margin must be in \[0, 1\), got 1.0"),
        ({"inline_threshold_ms": -1.0}, "inline_threshold_ms must be >= 0"),
        ({"queues": "orders"}, "queues must be a list of queue names, got the string 'orders'"),
        # msgspec does not check a Struct's field types when it is made: "4" met `<=` with a
        # bare TypeError, 4.5 slots were taken
        ({"concurrency": "4"}, "concurrency must be a number, got '4'"),
        ({"concurrency": 4.5}, "concurrency must be a whole number, got 4.5"),
        ({"chain_steps": True}, "chain_steps must be a number, got True"),
        ({"poll_wait_seconds": None}, "poll_wait_seconds must be a number, got None"),
        # ids the server refuses in every poll: such a worker started, then logged "PollTasks
        # refused" twice a second for as long as it ran
        (
            {"worker_id": "a b"},
            r"worker_id 'a b' has characters outside .*: the server refuses such a worker id",
        ),
        ({"worker_id": "w" * 201}, "worker_id is 201 characters long; the limit is 200: the server refuses"),
    ],
)
def test_bad_options_are_refused_by_name(fields: dict[str, Any], message: str) -> None:
    options = WorkerOptions(**fields)
    with pytest.raises(ValueError, match=message):
        check_options(options)
    with pytest.raises(ValueError, match=message):
        Worker("127.0.0.1:1", [BP], options)  # the worker checks them too, before anything starts


def test_numbers_of_either_kind_are_taken_where_they_fit() -> None:
    check_options(WorkerOptions(poll_wait_seconds=1, heartbeat_seconds=2, drain_seconds=0))  # ints for floats
    check_options(WorkerOptions(worker_id="payments-7.eu-west@host:1"))


def test_defaults_are_valid() -> None:
    check_options(WorkerOptions())


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIGGLE_LOCAL_BATCH_SIZE", "7")
    monkeypatch.setenv("WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS", "250")
    options = WorkerOptions()
    assert (options.local_batch_size, options.flush_interval) == (7, 0.25)
    assert WorkerOptions(local_batch_size=3).local_batch_size == 3  # an argument wins


def test_a_malformed_env_default_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIGGLE_LOCAL_BATCH_SIZE", "lots")
    with pytest.raises(EnvError, match="WIGGLE_LOCAL_BATCH_SIZE must be an integer, got 'lots'"):
        WorkerOptions()


def test_worker_arguments() -> None:
    with pytest.raises(ValueError, match="at least one blueprint"):
        Worker("127.0.0.1:1", [])
    with pytest.raises(ValueError, match="queues names no queue, so the worker serves no queues"):
        Worker("127.0.0.1:1", [BP], WorkerOptions(queues=[]))
    assert Worker("127.0.0.1:1", [BP]).queues == {"opts"}


def test_a_workflow_not_built_is_refused_naming_build() -> None:
    """A newcomer's mistake: ``Worker(target, [Workflow.define(...).step(f)])`` raised
    ``AttributeError: 'Workflow' object has no attribute 'definition'``."""
    unbuilt = Workflow.define("unbuilt").step(step)
    with pytest.raises(
        TypeError, match=r"blueprints\[1\] is a Workflow, not a Blueprint \(call \.build\(\) on it\)"
    ):
        Worker("127.0.0.1:1", [BP, unbuilt])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"blueprints\[0\] is a str"):
        Worker("127.0.0.1:1", ["orders"])  # type: ignore[list-item]


def test_a_lone_blueprint_is_refused_saying_to_pass_a_list() -> None:
    """``Worker(target, flow)`` met "'Blueprint' object is not iterable" (``wiggle worker`` takes
    a lone Blueprint: its module attribute, not this argument); as the test kit's ``workflows``."""
    with pytest.raises(
        TypeError,
        match=r"^blueprints is a list of Blueprints, got the Blueprint 'opts' itself: pass blueprints=\[\.\.\.\]",
    ):
        Worker("127.0.0.1:1", BP)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"^blueprints is a list of Blueprints, got the Workflow 'opts' itself"
    ):
        Worker("127.0.0.1:1", Workflow.define("opts").step(step))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^blueprints is a list of Blueprints, got int$"):
        Worker("127.0.0.1:1", 5)  # type: ignore[arg-type]
    assert [bp.name for bp in Worker("127.0.0.1:1", (BP,)).blueprints] == ["opts"]  # any iterable


def test_a_queue_no_blueprint_uses_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    """``--queues paymnets`` served nothing and said nothing (a docs trial)."""
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        Worker("127.0.0.1:1", [BP], WorkerOptions(queues=["opts", "paymnets"]))
    (line,) = [r.getMessage() for r in caplog.records if "no step of its blueprints uses" in r.getMessage()]
    assert "'paymnets'" in line and "(theirs: opts)" in line, line
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wiggle.worker"):
        Worker("127.0.0.1:1", [BP], WorkerOptions(queues=["opts"]))
    assert not [r for r in caplog.records if "no step of its blueprints uses" in r.getMessage()]
