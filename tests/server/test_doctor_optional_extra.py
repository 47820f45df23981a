"""``wiggle doctor`` marks an optional extra that is not installed "-", not "yes" (a check not
made), and it is no failure: the exit code stays 0 when every check made passed."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from wiggle import cli
from wiggle._cli import ops

_find_spec = importlib.util.find_spec


def _without_otel(name: str, *args: Any) -> Any:
    return None if name == "opentelemetry.sdk" else _find_spec(name, *args)


def _serving(target: str) -> tuple[str, bool, str]:
    return ("server", True, f"{target} answered")


async def _server_up(target: str) -> tuple[str, bool, str]:
    return _serving(target)


def test_a_missing_optional_extra_reads_as_not_checked_and_is_no_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _without_otel)
    monkeypatch.setattr(ops, "_server_check", _server_up)
    monkeypatch.delenv("WIGGLE_DATABASE_URL", raising=False)
    assert cli.main(["--target", "127.0.0.1:1", "doctor"]) == 0
    # the table's columns: CHECK (18), OK (4), DETAIL
    rows = {
        line[:18].strip(): (line[19:23].strip(), line[24:])
        for line in capsys.readouterr().out.splitlines()[1:]
    }
    ok, detail = rows["extra otel"]
    assert ok == "-" and detail.startswith("optional, not installed"), rows["extra otel"]
    assert rows["extra postgres"][0] == "yes"
    assert rows["schema"][0] == "-" and "not checked" in rows["schema"][1]

    assert cli.main(["--target", "127.0.0.1:1", "doctor", "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["extra otel"]["ok"] is True and checks["extra otel"]["checked"] is False
    assert checks["extra postgres"]["checked"] is True
