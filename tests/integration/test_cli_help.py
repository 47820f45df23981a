"""Every verb's help says what it does and shows an example; `wiggle completion` makes scripts
the shells accept, from the same parser."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wiggle import cli


def _verbs(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) for every subcommand, nested ones (schedule create...) included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((" ".join((*path, name)), sub))
                found.extend(_verbs(sub, (*path, name)))
    return found


VERBS = _verbs(cli.build_parser())


def test_the_walk_finds_every_verb() -> None:
    names = {name for name, _ in VERBS}
    expected = {
        "server", "migrate", "demo", "worker", "start", "get", "history", "cancel", "list",
        "complete-task", "signal", "retry", "schedule", "schedule create", "schedule update",
        "schedule list", "schedule get", "schedule pause", "schedule resume", "schedule delete",
        "schedule trigger", "token", "doctor", "ready", "workflows", "queues", "queues set-limit", "describe",
        "bench",
        "completion",
    }  # fmt: skip
    assert names == expected


@pytest.mark.parametrize("name, parser", VERBS, ids=[name for name, _ in VERBS])
def test_every_verb_has_a_description_and_an_example(name: str, parser: argparse.ArgumentParser) -> None:
    assert parser.description and len(parser.description) > 40, name
    assert parser.epilog and parser.epilog.startswith("examples:\n"), name
    examples = parser.epilog.splitlines()[1:]
    assert examples and all(line.startswith("  ") for line in examples if line), name
    # an example runs this very verb
    assert any(f"wiggle {name}" in line for line in examples), name
    if parser.add_help:
        text = parser.format_help()
        assert parser.description.split()[0] in text and "examples:" in text
    # every option and positional says what it is (the shared --target/--json included)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.dest in ("help", "bench_args"):
            continue
        assert action.help, f"wiggle {name}: {action.option_strings or action.dest} has no help"


def test_closed_sets_are_choices() -> None:
    by_name = dict(VERBS)

    def choices(verb: str, dest: str) -> list[str]:
        (action,) = [a for a in by_name[verb]._actions if a.dest == dest]
        return list(action.choices or [])

    assert choices("list", "status") == ["SCHEDULED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
    assert choices("demo", "mode") == ["SERVER", "LOCAL_SYNC", "LOCAL_ASYNC"]
    assert choices("schedule create", "overlap") == ["SKIP", "BUFFER_ONE", "ALLOW"]
    assert choices("schedule update", "catchup") == ["NONE", "LAST", "ALL"]
    assert choices("token", "role") == ["admin", "client", "worker", "viewer"]
    assert choices("worker", "transport") == ["stream", "unary"]
    assert choices("completion", "shell") == ["bash", "zsh", "fish"]
    # any case: the value is upper-cased before the check
    assert cli.build_parser().parse_args(["list", "--status", "failed"]).status == "FAILED"


def _completion(shell: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "completion", shell], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout


def test_bash_completion_is_valid_bash_and_completes_verbs_and_flags(tmp_path) -> None:
    script = tmp_path / "wiggle.bash"
    script.write_text(_completion("bash"))
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr

    def complete(*words: str) -> list[str]:
        line = " ".join(("wiggle", *words))
        probe = (
            f"source {script}; COMP_WORDS=(wiggle {' '.join(words)}); COMP_CWORD={len(words)}; "
            f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; _shtab_wiggle; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        )
        out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert {"server", "worker", "start", "schedule", "completion"} <= set(complete(""))
    assert "trigger" in complete("schedule", "")
    assert "--from-file" in complete("start", "orders", "--")
    assert {"FAILED", "RUNNING"} <= set(complete("list", "--status", ""))
    # a file option completes file names (here: this test's folder)
    (tmp_path / "orders.jsonl").write_text("{}\n")
    assert str(tmp_path / "orders.jsonl") in complete("start", "orders", "--from-file", f"{tmp_path}/o")


@pytest.mark.parametrize("shell, check", [("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"])])
def test_zsh_and_fish_completion(tmp_path, shell: str, check: list[str]) -> None:
    text = _completion(shell)
    assert "schedule" in text and "--from-file" in text and "completion" in text
    if shell == "zsh":
        assert text.startswith("#compdef wiggle")
    else:
        assert "complete -c wiggle" in text
    path = tmp_path / f"wiggle.{shell}"
    path.write_text(text)
    if shutil.which(check[0]) is None:
        # the shell is not installed on this machine (it is not on the CI machine): the script is
        # produced and names every verb; its syntax is checked wherever the shell exists
        return
    checked = subprocess.run([*check, str(path)], capture_output=True, text=True, env=dict(os.environ))
    assert checked.returncode == 0, checked.stderr


def test_python_dash_m_wiggle_is_the_wiggle_command() -> None:
    """Where the script is not on PATH (a venv not activated), ``python -m wiggle`` runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "wiggle", "workflows", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: wiggle workflows")
    bad = subprocess.run(
        [sys.executable, "-m", "wiggle", "nonsense"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "invalid choice: 'nonsense'" in bad.stderr


def test_the_command_line_page_maps_every_verb() -> None:
    """docs/cli.md calls its table the map: `wiggle ready` and `wiggle completion` were missing."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    mapped = set(re.findall(r"^\| `wiggle ([a-z-]+(?: [a-z-]+)?)", page, re.MULTILINE))
    top = {name for name, _ in VERBS if " " not in name}
    missing = sorted(v for v in top if v not in mapped and not any(m.startswith(v + " ") for m in mapped))
    assert not missing, f"verbs missing from docs/cli.md's map: {missing}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["start", "wf", "--start-delay", "-5m"], "--start-delay must not be negative, got '-5m'"),
        (["start", "wf", "--workflow-timeout", "-5m"], "--workflow-timeout must not be negative, got '-5m'"),
        (
            ["start", "wf", "--dedup-key", "k", "--dedup-window", "-.5h"],
            "--dedup-window must not be negative",
        ),
        (["schedule", "create", "s", "wf", "--every", "-5m"], "--every must not be negative, got '-5m'"),
        (["queues", "set-limit", "qx", "--rate", "-5/1s"], "--rate '-5/1s' is not N/PERIOD"),
    ],
)
def test_a_negative_duration_after_a_space_reaches_its_flags_check(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--start-delay -5m`` was argparse's "argument --start-delay: expected one argument" (an
    outside trial): "-5m" looked like an option, where "-5" is a number. It now says what
    ``--start-delay=-5m`` says; nothing is called (the target answers nothing)."""
    flag, value = argv[-2:]
    for words in (argv, [*argv[:-2], f"{flag}={value}"]):
        assert cli.main(["--target", "127.0.0.1:1", *words]) == 2
        err = capsys.readouterr().err
        assert err.startswith("wiggle: INVALID_ARGUMENT: ") and message in err, (words, err)


def test_an_option_after_an_option_that_takes_a_value_is_still_missing_its_value() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["start", "wf", "--priority", "-101"]).priority == -101
    with pytest.raises(SystemExit):  # "argument --start-delay: expected one argument", as before
        parser.parse_args(["start", "wf", "--start-delay", "--json"])
    assert parser.parse_args(["start", "wf", "--start-delay", "-1.5s"]).start_delay == "-1.5s"
