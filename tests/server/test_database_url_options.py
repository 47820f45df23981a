"""A database URL with a parameter libpq cannot use is bad input (INVALID_ARGUMENT naming
--database-url and the parameter, exit 2), never INTERNAL or UNAVAILABLE "is PostgreSQL running
at ...?": an outside trial's ``?connect_timeout=abc`` was INTERNAL (exit 1), ``?sslmode=bogus``
and ``host:notaport`` UNAVAILABLE (exit 5). The URLs here point at port 1, where nothing listens:
an answer other than INVALID_ARGUMENT would mean the command tried to connect."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wiggle import InvalidArgument
from wiggle._storage.postgres import migrate

BAD = [
    ("postgresql://postgres:hunter2@127.0.0.1:1/test?connect_timeout=abc", "connect_timeout='abc'"),
    ("postgresql://postgres:hunter2@127.0.0.1:1/test?sslmode=bogus", "sslmode='bogus'"),
    ("postgresql://postgres:hunter2@127.0.0.1:notaport/test", "port 'notaport'"),
    ("postgresql://postgres:hunter2@127.0.0.1:1/test?keepalives_idle=soon", "keepalives_idle='soon'"),
]


def wiggle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wiggle.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("verb", ["migrate", "server"])
@pytest.mark.parametrize(("url", "named"), BAD)
def test_a_bad_url_parameter_is_refused_before_connecting(verb: str, url: str, named: str) -> None:
    extra = ["--database-schema", "x"] if verb == "migrate" else ["--port", "0"]
    done = wiggle(verb, "--database-url", url, *extra)
    assert done.returncode == 2, done.stderr
    assert "INVALID_ARGUMENT" in done.stderr and "--database-url (WIGGLE_DATABASE_URL)" in done.stderr
    assert named in done.stderr, done.stderr
    assert "is PostgreSQL running" not in done.stderr and "INTERNAL" not in done.stderr
    assert "hunter2" not in done.stderr


async def test_a_parameter_libpq_refuses_when_it_connects_is_bad_input() -> None:
    """A value Wiggle does not check itself (libpq checks it only when it connects) is told from
    a server away by libpq's words, and not retried."""
    url = "postgresql://postgres:hunter2@127.0.0.1:1/test?ssl_min_protocol_version=x"
    with pytest.raises(InvalidArgument) as caught:
        await migrate(url, "x")
    text = str(caught.value)
    assert "--database-url (WIGGLE_DATABASE_URL)" in text and "ssl_min_protocol_version" in text, text
    assert "hunter2" not in text
