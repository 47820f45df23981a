"""The one module that reads the environment, and the home of the variables no table declares.

Every WIGGLE_* variable is declared once: the server's settings as ``ServerConfig`` fields
(wiggle/_server/config.py), the worker's options as ``WorkerOptions`` fields
(wiggle/_worker/options.py), what a client presents as ``Credentials`` fields
(wiggle/_security/credentials.py), and the rest — the ``wiggle`` command's, the logging's, the
hot paths' — in ``VARIABLES`` below. scripts/gen_settings_table.py makes docs/configuration.md's
tables from these declarations, and tests/test_settings_home.py checks that nothing else in
Wiggle reads ``os.environ`` (wiggle/_storage/postgres/db.py looks at libpq's own PG* variables,
which are libpq's settings, not Wiggle's).

An empty or unset variable means "use the default"; a malformed one is an error naming the
variable and the value, never silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "EnvError",
    "Variable",
    "VARIABLES",
    "child_environment",
    "environment",
    "env_int",
    "env_str",
    "setting",
    "setting_int",
]


class EnvError(ValueError):
    """A WIGGLE_* variable holds a value that cannot be used (the message names it)."""


class Variable(NamedTuple):
    """A variable that is not a field of a settings class: its name, default, reader, meaning."""

    name: str
    default: str
    read_by: str
    help: str


#: The variables read outside the settings classes, in the order docs/configuration.md lists them.
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable(
            "WIGGLE_TARGET",
            "127.0.0.1:7233",
            "the `wiggle` command",
            "the server's `host:port` (or several, comma-separated, for fail-over); `--target` wins",
        ),
        Variable(
            "WIGGLE_IMPL",
            "auto",
            "every process",
            "the hot paths' implementation: `auto` (the compiled twins when they import), "
            "`cython` (require the compiled twins), `python` (the pure ones)",
        ),
        Variable(
            "WIGGLE_LOG_LEVEL",
            "INFO",
            "`wiggle server`, `wiggle migrate`, `wiggle worker`, `Worker.run()`",
            "`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`",
        ),
        Variable(
            "WIGGLE_LOG_FORMAT",
            "text",
            "the same",
            "`text` or `json`: one JSON object per line ([Operations](operations.md#logs))",
        ),
        Variable(
            "WIGGLE_LOCAL_BATCH_SIZE",
            "64",
            "`WorkerOptions()`",
            "the default of `local_batch_size`",
        ),
        Variable(
            "WIGGLE_LOCAL_ASYNC_FLUSH_MILLIS",
            "0",
            "`WorkerOptions()`",
            "the default of `flush_interval`, in milliseconds",
        ),
        Variable(
            "WIGGLE_WORKER_PROCESSES",
            "1",
            "`wiggle worker`",
            "worker processes under one parent; `--processes` wins",
        ),
        Variable(
            "WIGGLE_WORKER_BLUEPRINTS",
            "",
            "`wiggle worker`",
            "the blueprints to serve (`module:attr`, comma- or space-separated) when none is named",
        ),
        Variable(
            "WIGGLE_WORKER_PATH",
            "",
            "`wiggle worker`",
            "folders (separated like `PATH`) to import the blueprints from, after `--path`",
        ),
    )
}


def environment() -> Mapping[str, str]:
    """The process's environment, as every reader in Wiggle sees it (read at each call, so a
    test's ``monkeypatch.setenv`` is seen)."""
    return os.environ


def child_environment(drop: Iterable[str] = (), **values: str) -> dict[str, str]:
    """A copy of the environment for a child process: ``drop``'s names left out, ``values`` set."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env.update(values)
    return env


def env_str(name: str, default: str = "", env: Mapping[str, str] | None = None) -> str:
    """The stripped value of ``name`` in ``env`` (default ``os.environ``), or ``default`` if unset or empty."""
    raw = (environment() if env is None else env).get(name, "").strip()
    return raw or default


def env_int(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """The integer value of ``name``, or ``default`` if unset or empty; EnvError if not an integer."""
    raw = env_str(name, "", env)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name} must be an integer, got {raw!r}") from None


def setting(name: str, env: Mapping[str, str] | None = None) -> str:
    """The value of the declared variable ``name`` (``VARIABLES``), or its declared default."""
    return env_str(name, VARIABLES[name].default, env)


def setting_int(name: str, env: Mapping[str, str] | None = None) -> int:
    """The integer value of the declared variable ``name``, or its declared default; EnvError if
    the value is not an integer."""
    return env_int(name, int(VARIABLES[name].default), env)
