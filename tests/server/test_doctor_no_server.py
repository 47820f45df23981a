"""docs/operations.md's restore runbook has ``wiggle doctor`` check the schema while every server
is stopped; doctor also checked the server at --target (127.0.0.1:7233 by default) and exited 1,
"server NO 127.0.0.1:7233 unreachable" (an outside trial). ``--no-server`` checks the database
alone (wiggle/_cli/admin.py ``cmd_doctor``)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pg import TEST_DATABASE_URL, temp_schema

from wiggle import cli
from wiggle._storage.postgres import migrate


@pytest.mark.postgres
def test_no_server_checks_the_database_alone(capsys: pytest.CaptureFixture[str]) -> None:
    with temp_schema() as schema:
        asyncio.run(migrate(TEST_DATABASE_URL, schema))  # cli.main runs its own event loop
        argv = ["--target", "127.0.0.1:1", "doctor", "--json", "--database-url", TEST_DATABASE_URL]
        code = cli.main([*argv, "--database-schema", schema, "--no-server"])
        checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
        assert checks["server"]["checked"] is False and checks["server"]["ok"] is True, checks["server"]
        assert checks["schema"]["ok"] is True and checks["schema"]["checked"] is True, checks["schema"]
        # the rest decides the code: autovacuum may be off on this machine's test cluster
        assert code == (0 if checks["autovacuum"]["ok"] else 1), checks

        # without it the server is checked, and its failure says how to leave it out
        assert cli.main([*argv, "--database-schema", schema]) == 1
        checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
        assert checks["server"]["ok"] is False
        assert "--no-server checks the database alone" in checks["server"]["detail"]


def test_no_server_without_a_database_url_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WIGGLE_DATABASE_URL", raising=False)
    assert cli.main(["doctor", "--no-server"]) == 2
    assert "--no-server leaves the database alone to check: give --database-url" in capsys.readouterr().err
