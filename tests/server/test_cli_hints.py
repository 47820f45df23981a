"""The CLI's hint after an UNAVAILABLE error (wiggle/cli.py ``_hint``): where it looked, and not a
wrong guess when the error already says what is wrong."""

from __future__ import annotations

import argparse

from wiggle.cli import _hint
from wiggle.errors import Unavailable

URL = "postgresql://postgres@127.0.0.1:5432/trial"


def test_a_full_postgresql_is_not_asked_whether_it_runs() -> None:
    # an outside trial: "FATAL: sorry, too many clients already (is PostgreSQL running at ...?)"
    args = argparse.Namespace(command="server", target="127.0.0.1:7233")
    exc = Unavailable("database unavailable: connection failed: FATAL:  sorry, too many clients already")
    hint = _hint(args, exc, URL)
    assert "is PostgreSQL running" not in hint
    assert "max_connections" in hint and "WIGGLE_POOL_SIZE" in hint


def test_a_tls_problem_gets_no_second_guess() -> None:
    args = argparse.Namespace(command="list", target="127.0.0.1:7233")
    exc = Unavailable("CERTIFICATE_VERIFY_FAILED (a TLS problem, not a missing server: check WIGGLE_TLS_CA)")
    assert _hint(args, exc, "") == ""


def test_an_absent_server_and_database_still_get_theirs() -> None:
    args = argparse.Namespace(command="list", target="127.0.0.1:7233")
    assert "is a `wiggle server` running at 127.0.0.1:7233?" in _hint(
        args, Unavailable("Connection refused"), ""
    )
    args = argparse.Namespace(command="server", target="")
    assert "is PostgreSQL running at" in _hint(args, Unavailable("database unavailable: refused"), URL)


def test_a_database_that_answers_and_refuses_is_not_asked_whether_it_runs() -> None:
    # an outside trial: `FATAL: database "trial_c_nodb" does not exist (is PostgreSQL running at ...?)`
    args = argparse.Namespace(command="migrate", target="")
    for fatal in [
        'database "trial_c_nodb" does not exist',
        'role "nobody" does not exist',
        'password authentication failed for user "postgres"',
        'no pg_hba.conf entry for host "10.0.0.9", user "w", database "w", no encryption',
    ]:
        exc = Unavailable(
            'database unavailable: connection failed: connection to server at "127.0.0.1", port 5432 '
            f"failed: FATAL:  {fatal}"
        )
        hint = _hint(args, exc, URL)
        assert "is PostgreSQL running" not in hint, (fatal, hint)
        assert "answered and refused this connection: check the database name, role and password" in hint
