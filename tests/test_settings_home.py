"""Each setting is declared once and read in one place (wiggle/_env.py says where each lives).

Only wiggle/_env.py reads the process environment; wiggle/_storage/postgres/db.py also looks at
libpq's own PG* variables. Every WIGGLE_* name Wiggle's code mentions is a declared one, so a
variable cannot be read, or documented in a message, without a home in a table
(scripts/gen_settings_table.py makes docs/configuration.md's tables from these declarations).
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

import wiggle
from wiggle._bench.arguments import _FLAGS as BENCH_FLAGS
from wiggle._env import VARIABLES
from wiggle._security.credentials import ENV_VARS
from wiggle._server.config import OLD_VARIABLES, SETTINGS
from wiggle._worker.options import WorkerOptions

SRC = Path(wiggle.__file__).parent
#: The modules that may read the environment (paths under src/wiggle/).
READERS = {"_env.py", "_storage/postgres/db.py"}
#: Reading the environment in any spelling: os.environ, os.getenv, os.putenv, `from os import environ`.
READS = re.compile(
    r"\bos\.(environ|environb|getenv|getenvb|putenv|unsetenv)\b|\bfrom os import\b.*\b(environ|getenv)\b"
)
#: Set by the benchmark for its own children (wiggle/_bench/e2e.py), never by a person.
INTERNAL = {"WIGGLE_BENCH_PARENT"}


def _sources() -> dict[str, str]:
    return {path.relative_to(SRC).as_posix(): path.read_text() for path in sorted(SRC.rglob("*.py"))}


def _declared() -> set[str]:
    worker = {"WIGGLE_WORKER_" + f.name.upper() for f in msgspec.structs.fields(WorkerOptions)}
    bench = {variable for _, variable, _ in BENCH_FLAGS if variable}
    return (
        {v for _, v, _ in SETTINGS}
        | set(OLD_VARIABLES)
        | worker
        | set(ENV_VARS.values())
        | set(VARIABLES)
        | bench
    )


def test_only_the_settings_module_reads_the_environment() -> None:
    readers = {
        f"{where}:{number}: {line.strip()}"
        for where, text in _sources().items()
        if where not in READERS
        for number, line in enumerate(text.splitlines(), 1)
        if READS.search(line)
    }
    assert not readers, "read the environment through wiggle/_env.py (or a settings class):\n" + "\n".join(
        sorted(readers)
    )


def test_the_check_sees_each_spelling() -> None:
    """The pattern above catches the ways a module could read the environment (so the test can fail)."""
    for line in (
        "x = os.environ['A']",
        "os.getenv('A')",
        "from os import environ",
        "from os import getenv, path",
    ):
        assert READS.search(line), line
    assert not READS.search("environment()") and not READS.search("import os")


def test_every_variable_mentioned_is_declared() -> None:
    declared = _declared() | INTERNAL
    unknown = {
        f"{name} ({where})"
        for where, text in _sources().items()
        for name in re.findall(r"\bWIGGLE_[A-Z0-9_]*[A-Z0-9]\b", text)
        if name not in declared
    }
    assert not unknown, (
        "declare each variable in its settings class or wiggle/_env.py VARIABLES:\n"
        + "\n".join(sorted(unknown))
    )


def test_declared_once() -> None:
    """No variable has two homes (the same name in two tables would have two defaults)."""
    homes = [
        *(v for _, v, _ in SETTINGS),
        *OLD_VARIABLES,
        *("WIGGLE_WORKER_" + f.name.upper() for f in msgspec.structs.fields(WorkerOptions)),
        *ENV_VARS.values(),
        *VARIABLES,
    ]
    assert sorted(n for n in set(homes) if homes.count(n) > 1) == []
