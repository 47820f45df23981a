"""Wiggle's log output: the level and the format from WIGGLE_LOG_LEVEL / WIGGLE_LOG_FORMAT.

``configure_logging`` is called by the ``wiggle`` command (server, demo, migrate) and by
``Worker.run``; a program that configures logging itself keeps its own setup (``Worker.run`` only
configures a process whose root logger has no handler). With ``WIGGLE_LOG_FORMAT=json`` every
record is one JSON object per line, with the instance id, node, attempt, worker id and workflow
where known: from the record's ``extra`` fields, or from the step a worker is running when the
record was made (``step_fields``, or the source the worker registers with ``add_field_source``,
which reads the step from the worker's context variable only when a record is formatted, so a
step costs nothing here), so a user's own log lines inside a handler carry them too.
Contexts and other payloads are never put in a log record by Wiggle.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TextIO

from ._env import VARIABLES, EnvError, env_str, setting

__all__ = [
    "LEVELS",
    "FORMATS",
    "CONTEXT_FIELDS",
    "JsonFormatter",
    "TEXT_FORMAT",
    "configure_logging",
    "step_fields",
    "add_field_source",
    "log_settings",
]

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
#: The fields a record carries (as ``extra``, or from ``step_fields``) when they are known.
CONTEXT_FIELDS = (
    "instance_id",
    "node_id",
    "attempt",
    "worker_id",
    "workflow",
    "queue",
    "task_id",
    "actor",  # the server's operator-action lines (wiggle/_server/operator.py)
    "action",
    "error",  # the server's final-failure lines (wiggle/_server/failures.py)
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_step_fields: contextvars.ContextVar[Mapping[str, object] | None] = contextvars.ContextVar(
    "wiggle_log_fields", default=None
)
_HANDLER_MARK = "_wiggle_handler"
#: Called by ``JsonFormatter`` for the fields of the work being done when a record is made (None:
#: none); the worker registers one that reads the step it is running (wiggle/_worker/step.py).
_field_sources: list[Callable[[], Mapping[str, object] | None]] = []


@contextmanager
def step_fields(fields: Mapping[str, object]) -> Iterator[None]:
    """Records made inside this block (this task or thread) carry ``fields`` in the JSON format."""
    token = _step_fields.set(fields)
    try:
        yield
    finally:
        _step_fields.reset(token)


def add_field_source(source: Callable[[], Mapping[str, object] | None]) -> None:
    """Have JSON records carry the fields ``source()`` returns when each is formatted (once per
    ``source``): the lazy form of ``step_fields``, for code that already keeps its current work in
    a context variable and should not pay for the fields on every step."""
    if source not in _field_sources:
        _field_sources.append(source)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields, the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        known = _step_fields.get()
        if known:
            out.update(known)
        for source in _field_sources:
            found = source()
            if found:
                out.update(found)
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None and value != "":
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str)


def log_settings(env: Mapping[str, str] | None = None, default_level: str | None = None) -> tuple[int, str]:
    """(level, format) from WIGGLE_LOG_LEVEL (default INFO) and WIGGLE_LOG_FORMAT (default text)."""
    default_level = default_level or VARIABLES["WIGGLE_LOG_LEVEL"].default  # a command's own default
    level = env_str("WIGGLE_LOG_LEVEL", default_level, env).upper()
    if level not in LEVELS:
        raise EnvError(f"WIGGLE_LOG_LEVEL must be one of {', '.join(LEVELS)}, got {level!r}")
    fmt = setting("WIGGLE_LOG_FORMAT", env).lower()
    if fmt not in FORMATS:
        raise EnvError(f"WIGGLE_LOG_FORMAT must be 'text' or 'json', got {fmt!r}")
    number: int = logging.getLevelName(level)
    return number, fmt


def configure_logging(
    env: Mapping[str, str] | None = None,
    stream: TextIO | None = None,
    only_if_unconfigured: bool = False,
    default_level: str | None = None,
) -> bool:
    """Install one handler on the root logger as WIGGLE_LOG_LEVEL / WIGGLE_LOG_FORMAT say.

    Replaces a handler an earlier call installed. With ``only_if_unconfigured`` a root logger that
    already has a handler (the program's own setup) is left alone. Returns whether it configured.
    Raises EnvError (a ValueError naming the variable) for a bad value.
    """
    level, fmt = log_settings(env, default_level)
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]
    if only_if_unconfigured and len(root.handlers) > len(ours):
        return False
    for handler in ours:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level)
    return True
