"""The test environment's arguments, checked before anything starts: the blueprints, the server
settings (their names, types and ranges), the start of virtual time and the durations that move
it. wiggle/_testing/environment.py calls these; each refusal names the argument and what fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import msgspec

from .._limits import MAX_DURATION_MILLIS
from .._model import ExecutionMode
from .._server.config import ServerConfig, check_config
from .._spelling import with_closest
from ..worker import WorkerOptions
from ..workflow import Blueprint, Workflow

__all__ = [
    "check_arguments",
    "checked_flag",
    "checked_mode",
    "checked_text",
    "checked_worker_options",
    "checked_workers",
    "checked_workflows",
    "epoch_millis",
    "millis_of",
    "wait_seconds",
    "with_settings",
]


def check_arguments(workflows: Iterable[Blueprint[Any]], options: dict[str, Any]) -> list[Blueprint[Any]]:
    """Every argument of a WorkflowEnvironment, checked as its ``__init__`` checks them, without
    making one; ``workflows`` as a list. SyncWorkflowEnvironment makes its environment at its
    start, on its loop's thread (sync.py), and a marker's ``workers="2"`` or a lone Blueprint
    met errors naming nothing there ("'<' not supported between 'str' and 'int'", "'Blueprint'
    object is not iterable"); with this its constructor refuses them, as the async one does."""
    found = checked_workflows(workflows)
    settings = dict(options)
    for name, check in _OWN_CHECKS.items():
        if name in settings:
            check(settings.pop(name))
    check_worker_naming(options.get("workers", 1), options.get("worker_options"))
    if settings:
        with_settings(ServerConfig(port=0), settings)
    return found


def checked_workflows(workflows: Iterable[Blueprint[Any]]) -> list[Blueprint[Any]]:
    """``workflows`` as a list of Blueprints; TypeError saying what to pass otherwise. A lone
    Blueprint met "'Blueprint' object is not iterable", and a Workflow not built was found only
    at the start, by a message about ``client.register``."""
    if isinstance(workflows, (Blueprint, Workflow)):
        raise TypeError(
            f"workflows is a list of Blueprints, got the {type(workflows).__name__} {workflows.name!r} "
            "itself: pass workflows=[...]"
        )
    try:
        found = list(workflows)
    except TypeError:
        raise TypeError(f"workflows is a list of Blueprints, got {type(workflows).__name__}") from None
    for index, bp in enumerate(found):
        if isinstance(bp, Workflow):
            raise TypeError(f"workflows[{index}] is the Workflow builder {bp.name!r}: call .build() on it")
        if not isinstance(bp, Blueprint):
            raise TypeError(f"workflows[{index}] is a {type(bp).__name__}, not a Blueprint")
    return found


def checked_flag(value: object, what: str) -> bool:
    """``value`` if it is a bool; TypeError naming ``what`` otherwise. A string is truthy:
    ``time_skipping="false"`` (a marker's keyword read from a config, say) left skipping on."""
    if not isinstance(value, bool):
        raise TypeError(f"{what} is True or False, got {value!r} ({type(value).__name__})")
    return value


def checked_workers(workers: object) -> int:
    """How many in-process workers (an int >= 0); TypeError or ValueError naming ``workers``.
    ``workers="2"`` met "'<' not supported between 'str' and 'int'", ``2.0`` "'float' object
    cannot be interpreted as an integer"."""
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise TypeError(
            f"workers is a number of workers (an int, 0 or more), got {workers!r} ({type(workers).__name__})"
        )
    if workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    return workers


def checked_worker_options(options: object) -> WorkerOptions | None:
    """``options`` if it is a WorkerOptions (or None); TypeError saying what to pass. A dict met
    "'dict' object has no attribute 'queues'" at the start."""
    if options is not None and not isinstance(options, WorkerOptions):
        hint = "WorkerOptions(**{...})" if isinstance(options, dict) else "WorkerOptions(...)"
        raise TypeError(
            f"worker_options is a wiggle.WorkerOptions, got {type(options).__name__} {options!r}: pass "
            f"worker_options={hint}"
        )
    return options


def check_worker_naming(workers: int, options: WorkerOptions | None) -> None:
    """ValueError if one ``worker_id`` would name several workers: their leases, holds and
    histories could not be told apart."""
    if workers > 1 and options is not None and options.worker_id:
        raise ValueError(
            f"worker_options.worker_id={options.worker_id!r} would name all {workers} "
            "workers alike: leave it empty (they become test-worker-1, -2...)"
        )


def checked_text(value: object, what: str) -> str:
    """``value`` if it is a str; TypeError naming ``what`` (``database_url=5`` met "'int' object
    has no attribute 'encode'" at the start)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} is a str, got {value!r} ({type(value).__name__})")
    return value


def checked_mode(mode: object) -> ExecutionMode:
    """``mode`` (an ExecutionMode or its name) as an ExecutionMode; TypeError naming the modes."""
    if isinstance(mode, ExecutionMode):
        return mode
    names = [m.value for m in ExecutionMode]
    if isinstance(mode, str) and mode in names:
        return ExecutionMode(mode)
    raise TypeError(f"execution_mode is an ExecutionMode or one of {', '.join(names)}, got {mode!r}")


def with_settings(config: ServerConfig, settings: dict[str, Any]) -> ServerConfig:
    """``config`` with the server ``settings`` given to the environment: TypeError for a name
    ServerConfig does not have (``_unknown_settings``) or a value not of its type
    (``_typed_settings``), InvalidArgument for one out of its range (``check_config``, as
    ``wiggle server`` checks its settings)."""
    unknown = sorted(set(settings) - set(config.__struct_fields__))
    if unknown:
        raise TypeError(_unknown_settings(unknown, config.__struct_fields__))
    return check_config(msgspec.structs.replace(config, **_typed_settings(settings)))


def millis_of(delta: timedelta | float | int, what: str) -> int:
    """``delta`` (a timedelta or seconds) in whole milliseconds, for ``advance``, ``sleep`` and a
    schedule's ``every``; TypeError or ValueError naming ``what`` for anything else."""
    if isinstance(delta, timedelta):
        millis = delta / timedelta(milliseconds=1)
    elif isinstance(delta, (int, float)) and not isinstance(delta, bool):
        millis = float(delta) * 1000
    else:
        raise TypeError(f"{what} is a timedelta or seconds, not {type(delta).__name__}")
    if millis < 0:
        raise ValueError(f"{what} must not be negative (virtual time only moves forward): {delta!r}")
    if not millis <= MAX_DURATION_MILLIS:  # NaN too: it was "cannot convert float NaN to integer"
        raise ValueError(
            f"{what} must be a finite duration of at most {MAX_DURATION_MILLIS // 1000} seconds (10 "
            f"years, as every duration of a workflow), got {delta!r}"
        )
    return round(millis)


def wait_seconds(timeout: object, what: str = "timeout") -> float:
    """A wait's real ``timeout`` (a timedelta or seconds, as every duration the clients take:
    docs/api/clients.md) in seconds; TypeError or ValueError naming ``what`` for anything else.
    ``timeout=timedelta(seconds=10)`` met "unsupported operand type(s) for +: 'float' and
    'datetime.timedelta'". ``inf`` waits as long as it takes."""
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"{what} is a timedelta or seconds (real time), got {timeout!r} ({type(timeout).__name__})"
        )
    if not seconds >= 0:  # NaN too
        raise ValueError(f"{what} must be 0 or more seconds (real time), got {timeout!r}")
    return seconds


def _typed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The server settings given to an environment, each converted to its field's type (an
    execution mode's name to the mode); TypeError naming the one that does not fit. Unchecked,
    ``lease_millis="x"`` started a server whose first start was an internal error, and
    ``lease_millis=2.5`` one whose every poll was; ``check_config`` then checks the ranges
    (``lease_millis=-5`` ran, as a wiggle server refuses to)."""
    types = {field.name: field.type for field in msgspec.structs.fields(ServerConfig)}
    typed: dict[str, Any] = {}
    for name, value in settings.items():
        try:
            typed[name] = msgspec.convert(value, types[name])
        except msgspec.ValidationError as exc:
            raise TypeError(f"the server setting {name}={value!r} does not fit: {exc}") from None
    return typed


def epoch_millis(start: datetime | None) -> int | None:
    """Where the virtual clock starts (``start``, an aware datetime), in epoch ms; None: now."""
    if start is None:
        return None
    if not isinstance(start, datetime):  # "2030-01-01" met "'str' object has no attribute 'tzinfo'"
        raise TypeError(
            f"start is an aware datetime (datetime(2030, 1, 1, tzinfo=timezone.utc)), got {start!r} "
            f"({type(start).__name__})"
        )
    if start.tzinfo is None:
        raise ValueError(f"start={start!r} is naive: give a timezone (datetime(..., tzinfo=timezone.utc))")
    return round(start.timestamp() * 1000)


#: The environment's own keywords, beside the server's settings (``_unknown_settings``).
_OWN_KEYWORDS = (
    "workflows",
    "workers",
    "worker_options",
    "database_url",
    "database_schema",
    "execution_mode",
    "time_skipping",
    "start",
)


#: How ``check_arguments`` checks each of them (WorkflowEnvironment.__init__ calls the same).
_OWN_CHECKS: dict[str, Callable[[Any], object]] = {
    "workers": checked_workers,
    "worker_options": checked_worker_options,
    "database_url": lambda value: checked_text(value, "database_url"),
    "database_schema": lambda value: checked_text(value, "database_schema"),
    "execution_mode": checked_mode,
    "time_skipping": lambda value: checked_flag(value, "time_skipping"),
    "start": epoch_millis,
}


def _unknown_settings(unknown: list[str], fields: tuple[str, ...]) -> str:
    """The message for keywords neither the environment nor ServerConfig has (a typo in a
    ``@pytest.mark.wiggle(...)``, say): each with the closest known name."""
    return (
        f"unknown test environment setting(s): {with_closest(unknown, (*_OWN_KEYWORDS, *fields))}; it takes "
        f"{', '.join(_OWN_KEYWORDS)}, and the server's settings (ServerConfig fields, e.g. lease_millis)"
    )
