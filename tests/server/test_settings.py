"""Server settings are declared once (wiggle/_server/config.py): the variables, the flags, the
bounds and the README's table all come from the ServerConfig fields."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from wiggle import cli
from wiggle._server.config import BOUNDS, DECLARED, OLD_FLAGS, SETTINGS, ServerConfig, env_name, from_mapping
from wiggle.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_is_declared_and_named_after_itself() -> None:
    assert list(DECLARED) == list(ServerConfig.__struct_fields__)
    assert [(field, var) for field, var, _ in SETTINGS] == [(f, "WIGGLE_" + f.upper()) for f in DECLARED]
    assert all(help_text for _, _, help_text in SETTINGS)


def test_every_numeric_bound_is_enforced_with_the_flag_and_variable_named() -> None:
    assert {"port", "http_port", "lease_millis", "processes"} <= set(BOUNDS)
    for field, (low, _high) in BOUNDS.items():
        with pytest.raises(InvalidArgument, match=f"--{field.replace('_', '-')} \\({env_name(field)}\\)"):
            from_mapping({field: int(low) - 1}, env={})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "WIGGLE_GROUP_COMMITS",
            "two",
            "--group-commits (WIGGLE_GROUP_COMMITS) must be an integer, got 'two'",
        ),
        ("WIGGLE_REUSE_PORT", "maybe", "--reuse-port (WIGGLE_REUSE_PORT) must be true or false, got 'maybe'"),
        (
            "WIGGLE_RELOAD_SECONDS",
            "soon",
            "--reload-seconds (WIGGLE_RELOAD_SECONDS) must be a number, got 'soon'",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_with_the_flag_and_variable_named(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        from_mapping({}, env={variable: value})
    assert str(refused.value) == message


def test_every_setting_is_a_flag_of_wiggle_server() -> None:
    parser = cli.build_parser()
    for field, _, _ in SETTINGS:
        flag = "--" + field.replace("_", "-")
        args = parser.parse_args(
            ["server", flag] if isinstance(getattr(ServerConfig(), field), bool) else ["server", flag, "1"]
        )
        assert getattr(args, field) is not None, flag


@pytest.mark.parametrize(
    "old, new_field, value",
    [
        ("WIGGLE_LOCAL_MAX_STEPS", "max_local_steps", 7),
        ("WIGGLE_RETENTION", "retention_seconds", 60),
        ("WIGGLE_METRICS_PORT", "http_port", 9464),
        ("WIGGLE_PURGE_INTERVAL", "purge_interval_seconds", 5.0),
    ],
)
def test_an_older_variable_still_works_and_warns(
    caplog: pytest.LogCaptureFixture, old: str, new_field: str, value: object
) -> None:
    with caplog.at_level(logging.WARNING, logger="wiggle.server"):
        config = from_mapping({}, env={old: str(value)})
    assert getattr(config, new_field) == value
    assert f"{old} is deprecated: set {env_name(new_field)} instead" in caplog.text
    # the new name wins over the old one, silently
    caplog.clear()
    assert getattr(from_mapping({}, env={old: "1", env_name(new_field): str(value)}), new_field) == value
    assert "deprecated" not in caplog.text


def test_the_older_flag_still_works_and_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    """The parser notes it; the server warns of it once logging is set up (in the log's format:
    tests/integration/test_server_group.py)."""
    assert OLD_FLAGS == {"--metrics-port": "http_port"}
    args = cli.build_parser().parse_args(["server", "--metrics-port", "9464"])
    assert args.http_port == "9464"
    assert args.deprecated_flags == [("--metrics-port", "--http-port")]
    assert capsys.readouterr().err == ""


def test_the_readme_table_is_the_one_the_declaration_makes() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_settings_table.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


async def test_the_start_line_says_whether_join_diffs_are_on(caplog: pytest.LogCaptureFixture) -> None:
    """A rolling switch of --join-diffs needs to see which servers have it (an upgrade trial could
    tell only from the join rows in the database)."""
    from wiggle.testing import EmbeddedServer

    with caplog.at_level(logging.INFO, logger="wiggle.server"):
        async with EmbeddedServer(join_diffs=True):
            pass
        async with EmbeddedServer():
            pass
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wiggle server on")]
    assert len(lines) == 2 and lines[0].endswith(", join diffs on)") and "join diffs" not in lines[1], lines
