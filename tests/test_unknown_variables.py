"""A WIGGLE_* variable nothing reads (a misspelling) is named at start, with the closest known name.

Found by an outside operator trial: ``WIGGLE_LEASE_MILLI=5`` was ignored without a word. The
known names are every name Wiggle reads anywhere (wiggle/_env.py ``known_variables``), so a
variable Wiggle does read is never warned about: every WIGGLE_ name src/ and docs/ mention is
checked to be one of them.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import wiggle
from wiggle._env import DEVELOPMENT_VARIABLES, known_variables, unknown_variables, warn_unknown_variables

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(wiggle.__file__).parent
NAME = re.compile(r"\bWIGGLE_[A-Z0-9_]*[A-Z0-9]\b")

#: Names the docs mention that are no variable: the placeholders of the log lines in
#: docs/troubleshooting.md and docs/configuration.md.
NOT_VARIABLES = {"WIGGLE_X", "WIGGLE_Y"}


def _mentioned() -> dict[str, str]:
    """Each WIGGLE_ name the package's source, the docs, the README and CI's files mention -> where."""
    files = [
        *sorted(SRC.rglob("*.py")),
        *sorted((ROOT / "docs").rglob("*.md")),
        ROOT / "README.md",
        ROOT / "cibuildwheel.toml",
        *sorted((ROOT / ".ci").rglob("*")),
    ]
    found: dict[str, str] = {}
    for path in files:
        if path.is_file():
            where = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
            for name in NAME.findall(path.read_text(errors="replace")):
                found.setdefault(name, where)
    return found


def test_every_name_src_and_docs_mention_is_known() -> None:
    mentioned = _mentioned()
    assert {"WIGGLE_TARGET", "WIGGLE_IMPL", "WIGGLE_LOG_LEVEL", "WIGGLE_TEST_POSTGRES"} <= set(mentioned)
    unknown = {
        f"{name} ({where})"
        for name, where in mentioned.items()
        if name not in known_variables() and name not in NOT_VARIABLES
    }
    assert not unknown, "a WIGGLE_ name no declaration holds (wiggle/_env.py known_variables):\n" + "\n".join(
        sorted(unknown)
    )


def test_no_known_variable_is_warned_about() -> None:
    env = {name: "1" for name in known_variables()}
    assert unknown_variables(env) == []
    # the test suite's own (tests/pg.py, tests/dashboard/, CI) and the older server names too
    assert {"WIGGLE_TEST_POSTGRES", "WIGGLE_TEST_DATABASE_URL", "WIGGLE_REQUIRE_CYTHON"} <= set(
        DEVELOPMENT_VARIABLES
    )
    assert {"WIGGLE_RETENTION", "WIGGLE_PURGE_INTERVAL", "WIGGLE_BENCH_STEPS"} <= known_variables()


@pytest.mark.parametrize(
    "name, closest",
    [
        ("WIGGLE_LEASE_MILLI", "WIGGLE_LEASE_MILLIS"),  # the trial's
        ("WIGGLE_DATABASE_URI", "WIGGLE_DATABASE_URL"),
        ("WIGGLE_WORKER_CONCURENCY", "WIGGLE_WORKER_CONCURRENCY"),
        ("WIGGLE_CONCURRENCY", "WIGGLE_WORKER_CONCURRENCY"),  # a deployment's name before the benchmark's
        ("WIGGLE_RETENTION_DAYS", "WIGGLE_RETENTION_SECONDS"),  # never an older name, which warns again
        ("WIGGLE_DB_POOL_SIZE", "WIGGLE_POOL_SIZE"),
        ("wiggle_port", "WIGGLE_PORT"),  # the variables are case-sensitive
        ("WIGGLE_TEST_PG", "WIGGLE_TEST_POSTGRES"),
        ("WIGGLE_FROBNICATE", ""),  # nothing close: no guess
    ],
)
def test_a_misspelling_is_named_with_the_closest_known_name(name: str, closest: str) -> None:
    assert unknown_variables({name: "5", "WIGGLE_LEASE_MILLIS": "5000", "PATH": "/bin"}) == [(name, closest)]


def test_one_warning_per_unknown_variable(caplog: pytest.LogCaptureFixture) -> None:
    env = {"WIGGLE_LEASE_MILLI": "5", "WIGGLE_FROBNICATE": "1", "WIGGLE_PORT": "7233", "HOME": "/"}
    with caplog.at_level(logging.WARNING, logger="wiggle.test"):
        warn_unknown_variables(logging.getLogger("wiggle.test"), env)
    assert [r.getMessage() for r in caplog.records] == [
        "WIGGLE_FROBNICATE is not a variable Wiggle reads; it is ignored (docs/configuration.md lists them all)",
        "WIGGLE_LEASE_MILLI is not a variable Wiggle reads; it is ignored (did you mean WIGGLE_LEASE_MILLIS?)",
    ]
