"""The one module that reads the environment, and the home of the variables no table declares.

Every WIGGLE_* variable is declared once: the server's settings as ``ServerConfig`` fields
(wiggle/_server/config.py), the worker's options as ``WorkerOptions`` fields
(wiggle/_worker/options.py), what a client presents as ``Credentials`` fields
(wiggle/_security/credentials.py), and the rest — the ``wiggle`` command's, the logging's, the
hot paths' — in ``VARIABLES`` below (the benchmark's flags declare theirs in
wiggle/_bench/arguments.py, and the test suite's few are ``DEVELOPMENT_VARIABLES``).
scripts/gen_settings_table.py makes docs/configuration.md's tables from these declarations, and
tests/test_settings_home.py checks that nothing else in Wiggle reads ``os.environ``
(wiggle/_storage/postgres/db.py looks at libpq's own PG* variables, which are libpq's settings,
not Wiggle's).

An empty or unset variable means "use the default"; a malformed one is an error naming the
variable and the value, never silently ignored. A WIGGLE_* variable no declaration names (a
misspelled one, an S too few) is read by nothing: ``wiggle server``, ``migrate`` and ``worker``
warn about each at start (``unknown_variables``), naming the closest known one.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "DEVELOPMENT_VARIABLES",
    "EnvError",
    "IMPL_CHOICES",
    "Variable",
    "VARIABLES",
    "child_environment",
    "environment",
    "env_int",
    "env_str",
    "impl_choice",
    "known_variables",
    "setting",
    "setting_int",
    "take_variable",
    "unknown_variables",
    "warn_unknown_variables",
]

#: WIGGLE_IMPL's values (wiggle/_fast/__init__.py picks the hot paths by it, at import).
IMPL_CHOICES = ("auto", "cython", "python")


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
            "the server's `host:port` (or several, comma-separated, for fail-over; a URL or a host without "
            "its port is refused); `--target` wins",
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


def take_variable(name: str) -> str:
    """The stripped value of ``name`` ("" if unset), removed from this process's environment so
    that the processes it starts do not inherit it: a variable a parent sets for its child alone
    (wiggle/_cli/parent.py), never a setting."""
    return os.environ.pop(name, "").strip()


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


#: Variables only Wiggle's own test suite, CI and benchmark read, never a deployment: not in
#: docs/configuration.md, but known, so a developer running the suite is not warned of them.
#: Written without their WIGGLE_ prefix: tests/test_settings_home.py takes every WIGGLE_ name
#: in src/ for one a deployment may set, with a home in a settings table, and these are not.
DEVELOPMENT_VARIABLES: dict[str, str] = {
    "WIGGLE_" + tail: where
    for tail, where in (
        ("TEST_POSTGRES", "tests/: run the PostgreSQL store's tests too (CI sets it)"),
        ("TEST_DATABASE_URL", "tests/pg.py: the test suite's PostgreSQL server"),
        ("REQUIRE_CYTHON", "tests/fast/test_selector.py: the compiled twins must load (cibuildwheel.toml)"),
        ("CHROMIUM", "tests/dashboard/: the browser the dashboard's browser tests drive"),
        ("CHROMEDRIVER", "tests/dashboard/: its driver"),
        ("SCREENSHOTS", "tests/dashboard/: where those tests save their screenshots"),
        ("BENCH_PARENT", "wiggle/_bench/e2e.py: set for the benchmark's own children"),
    )
}


def impl_choice(env: Mapping[str, str] | None = None) -> str:
    """WIGGLE_IMPL, trimmed and in lower case; EnvError when it is none of ``IMPL_CHOICES``.

    wiggle/_fast reads the variable at import and raises ImportError for such a value (a
    library's import cannot do better); the ``wiggle`` command asks here first, so a bad value
    is a one-line error, exit 2, like every other malformed variable.
    """
    value = setting("WIGGLE_IMPL", env).lower()
    if value not in IMPL_CHOICES:
        raise EnvError(f"WIGGLE_IMPL must be one of {', '.join(IMPL_CHOICES)}, got {value!r}")
    return value


def _current_variables() -> frozenset[str]:
    """The names a deployment sets today: the server's settings, the worker's options, what
    clients present and ``VARIABLES`` (the ones a misspelling is likely to have meant)."""
    # late: the settings classes import this module
    import msgspec

    from ._security.credentials import ENV_VARS
    from ._server.config import SETTINGS
    from ._worker.options import WorkerOptions

    worker_prefix = "WIGGLE_WORKER_"  # wiggle/_cli/worker.py ENV_PREFIX
    return frozenset(
        {
            *(variable for _, variable, _ in SETTINGS),
            *(worker_prefix + f.name.upper() for f in msgspec.structs.fields(WorkerOptions)),
            *ENV_VARS.values(),
            *VARIABLES,
        }
    )


def known_variables() -> frozenset[str]:
    """Every WIGGLE_* name Wiggle reads anywhere: a deployment's (the server's settings, the
    worker's options, what clients present, ``VARIABLES``), the server settings' older names, the
    benchmark's flags (wiggle/_bench/arguments.py) and ``DEVELOPMENT_VARIABLES``
    (tests/test_unknown_variables.py checks that every name src/ and docs/ mention is here)."""
    from ._bench.arguments import _FLAGS as BENCH_FLAGS  # late, as above
    from ._server.config import OLD_VARIABLES

    bench = {variable for _, variable, _ in BENCH_FLAGS if variable}
    return _current_variables() | {*OLD_VARIABLES, *bench, *DEVELOPMENT_VARIABLES}


def unknown_variables(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Each variable of ``env`` (default: the process's) named WIGGLE_* in any case that Wiggle
    does not read, with the known name closest to it ("" when none is close), in name order.

    The closest name is looked for among a deployment's variables first (never an older name,
    which would only warn again), then among the benchmark's and the test suite's. Names are
    compared without the WIGGLE_ prefix they share: no name is "close" to WIGGLE_HOST for the
    seven letters in front.
    """
    from ._server.config import OLD_VARIABLES  # late, as above

    env = environment() if env is None else env
    known = known_variables()
    current = _current_variables()
    prefix = len("WIGGLE_")
    groups = [
        {name[prefix:]: name for name in current},
        {name[prefix:]: name for name in known - current - set(OLD_VARIABLES)},
    ]
    found = []
    for name in sorted(env):
        if not name.upper().startswith("WIGGLE_") or name in known:
            continue
        tail = name.upper()[prefix:]
        close = ""
        for tails in groups:
            match = difflib.get_close_matches(tail, tails, n=1)
            if match:
                close = tails[match[0]]
                break
        found.append((name, close))
    return found


def warn_unknown_variables(log: logging.Logger, env: Mapping[str, str] | None = None) -> None:
    """Log one warning for each variable ``unknown_variables`` finds (at a command's start)."""
    for name, close in unknown_variables(env):
        log.warning(
            "%s is not a variable Wiggle reads; it is ignored (%s)",
            name,
            f"did you mean {close}?" if close else "docs/configuration.md lists them all",
        )
