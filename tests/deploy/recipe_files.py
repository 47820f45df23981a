"""The deployment recipes (deploy/) read as data: each command line they run, each variable they
set, and the variables Wiggle reads, from the places they are declared."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from wiggle import cli
from wiggle._cli import worker as worker_cli
from wiggle._security.credentials import ENV_VARS as CREDENTIAL_VARIABLES
from wiggle._server.config import OLD_VARIABLES, SETTINGS
from wiggle.worker import WorkerOptions

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
SYSTEMD = DEPLOY / "systemd"
EXAMPLE = DEPLOY / "example"
UNITS = ("wiggle-server.service", "wiggle-worker@.service")
#: the instance the worker template is checked as (its env file is deploy/systemd/worker-orders.env)
WORKER_INSTANCE = "orders"
#: where the units expect the virtual environment
UNIT_WIGGLE = "/opt/wiggle/venv/bin/wiggle"


class CommandLine(NamedTuple):
    """A `wiggle` command a recipe runs: where it is written, its arguments, its variables."""

    where: str
    argv: list[str]  # after `wiggle`
    env: dict[str, str]


# ------------------------------------------------------------------ the variables Wiggle reads


def known_variables() -> dict[str, str]:
    """Every WIGGLE_* variable a server, a worker or the command line reads -> who reads it,
    from where each is declared (no list kept by hand)."""
    known = {var: "server (wiggle/_server/config.py)" for _, var, _ in SETTINGS}
    for field in msgspec.structs.fields(WorkerOptions):
        known[worker_cli.ENV_PREFIX + field.name.upper()] = "worker (WorkerOptions)"
    for var in worker_cli.COMMAND_VARIABLES:
        known[var] = "wiggle worker (wiggle/_cli/worker.py)"
    for var in CREDENTIAL_VARIABLES.values():
        known[var] = "client and worker credentials (wiggle/_security/credentials.py)"
    known["WIGGLE_TARGET"] = "client and worker target (wiggle/_cli/parser.py)"
    for var in ("WIGGLE_LOG_LEVEL", "WIGGLE_LOG_FORMAT"):
        known[var] = "logging (wiggle/_logging.py)"
    return known


def deprecated_variables() -> set[str]:
    return set(OLD_VARIABLES)


# ------------------------------------------------------------------ Dockerfile


def dockerfile_instructions(text: str | None = None) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text() if text is None else text
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def stages(instructions: list[tuple[str, str]] | None = None) -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each from its FROM to the next (build first, runtime last)."""
    instructions = dockerfile_instructions() if instructions is None else instructions
    starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    return [instructions[a:b] for a, b in zip(starts, [*starts[1:], len(instructions)], strict=True)]


def exec_form(arguments: str, where: str) -> list[str]:
    """A JSON-array (exec form) CMD/ENTRYPOINT: shell form would run under /bin/sh, which turns
    SIGTERM away from wiggle."""
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"{where}: not exec form"
    return list(value)


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    """The runtime stage's ENV (the last FROM onwards): KEY=VALUE pairs."""
    last_from = max(i for i, (k, _) in enumerate(instructions) if k == "FROM")
    env: dict[str, str] = {}
    for keyword, rest in instructions[last_from:]:
        if keyword == "ENV":
            for pair in shlex.split(rest):
                key, sep, value = pair.partition("=")
                assert sep, f"ENV {pair!r}: write KEY=VALUE"
                env[key] = value
    return env


def dockerfile_commands() -> list[CommandLine]:
    instructions = dockerfile_instructions()
    env = dockerfile_env(instructions)
    (entry,) = [exec_form(r, "ENTRYPOINT") for k, r in instructions if k == "ENTRYPOINT"]
    (cmd,) = [exec_form(r, "CMD") for k, r in instructions if k == "CMD"]
    (health,) = [r for k, r in instructions if k == "HEALTHCHECK"]
    health_cmd = exec_form(health.split(" CMD ", 1)[1], "HEALTHCHECK")
    assert entry == ["wiggle"] and health_cmd[0] == "wiggle", (entry, health_cmd)
    return [
        CommandLine("Dockerfile ENTRYPOINT + CMD", [*entry[1:], *cmd], env),
        CommandLine("Dockerfile HEALTHCHECK", health_cmd[1:], env),
    ]


# ------------------------------------------------------------------ compose


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    assert all(isinstance(v, str) for v in env.values()), f"quote every value: {env}"
    return dict(env)


def compose_commands() -> list[CommandLine]:
    """The command of every service run from the Wiggle image (ENTRYPOINT ["wiggle"]), with the
    image's ENV under the service's environment."""
    image_env = dockerfile_env(dockerfile_instructions())
    found = []
    for name, service in compose()["services"].items():
        if service.get("image") != "wiggle:local":
            continue
        command = service["command"]
        assert isinstance(command, list), f"compose {name}: command as a list, not a string"
        env = {**image_env, **compose_env(service)}
        found.append(CommandLine(f"compose {name}", list(command), env))
        test = (service.get("healthcheck") or {}).get("test")
        if test:  # a health check of its own, run in the image: ["CMD", "wiggle", ...]
            assert test[:2] == ["CMD", "wiggle"], f"compose {name}: healthcheck {test!r}"
            found.append(CommandLine(f"compose {name} healthcheck", list(test[2:]), env))
    return found


# ------------------------------------------------------------------ systemd


def unit_lines(name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file."""
    section = ""
    out = []
    for raw in (SYSTEMD / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def unit_value(name: str, key: str) -> list[str]:
    return [v for _, k, v in unit_lines(name) if k == key]


def env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile: KEY=VALUE lines, # comments."""
    env = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), f"{path.name}: {line!r}"
        env[key] = value
    return env


def unit_env_files(name: str) -> list[Path]:
    """The repository's example of each EnvironmentFile=/etc/wiggle/X.env of a unit."""
    files = []
    for value in unit_value(name, "EnvironmentFile"):
        path = value.lstrip("-").replace("%i", WORKER_INSTANCE)
        assert path.startswith("/etc/wiggle/"), f"{name}: EnvironmentFile {value}"
        files.append(SYSTEMD / Path(path).name)
    return files


def systemd_commands() -> list[CommandLine]:
    found = []
    for name in UNITS:
        env: dict[str, str] = {}
        for path in unit_env_files(name):
            env.update(env_file(path))
        (start,) = unit_value(name, "ExecStart")
        argv = shlex.split(start)
        assert argv[0] == UNIT_WIGGLE, f"{name}: ExecStart runs {argv[0]}"
        found.append(CommandLine(f"systemd {name} ExecStart", argv[1:], env))
    return found


def every_command() -> list[CommandLine]:
    return [*dockerfile_commands(), *compose_commands(), *systemd_commands()]


# ------------------------------------------------------------------ the parser


def verb_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the verb (and sub-verb) ``argv`` starts with."""
    parser: argparse.ArgumentParser = cli.build_parser()
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}
