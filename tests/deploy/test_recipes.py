"""The deployment recipes (deploy/) checked against the code, without a Docker engine (none runs
on the CI machine; docs/deployment.md): every command line they run parses and answers --help,
every flag exists as written, every WIGGLE_* variable they set is one Wiggle reads (and its value
is accepted), compose.yaml references only what it defines, the systemd units pass
`systemd-analyze verify`, and the stop timeouts leave room for the drain."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wiggle import Blueprint
from wiggle._cli.worker import options_from
from wiggle._server.app import WiggleServer
from wiggle._server.config import from_mapping
from wiggle.worker import WorkerOptions

from .recipe_files import (
    COMPOSE,
    DEPLOY,
    DOCKERFILE,
    EXAMPLE,
    ROOT,
    SYSTEMD,
    UNIT_WIGGLE,
    UNITS,
    WORKER_INSTANCE,
    CommandLine,
    compose,
    compose_env,
    deprecated_variables,
    dockerfile_instructions,
    env_file,
    every_command,
    known_variables,
    option_strings,
    stages,
    unit_value,
    verb_parser,
)

COMMANDS = every_command()
IDS = [c.where for c in COMMANDS]
_wiggle = Path(sys.executable).with_name("wiggle")
WIGGLE = [str(_wiggle)] if _wiggle.exists() else [sys.executable, "-m", "wiggle.cli"]


def test_the_recipes_run_wiggle_as_expected() -> None:
    verbs = {c.where: c.argv[0] for c in COMMANDS}
    assert verbs == {
        "Dockerfile ENTRYPOINT + CMD": "server",
        "Dockerfile HEALTHCHECK": "ready",
        "compose migrate": "migrate",
        "compose server-1": "server",
        "compose server-2": "server",
        "compose worker": "worker",
        "compose worker healthcheck": "ready",
        "systemd wiggle-server.service ExecStart": "server",
        "systemd wiggle-worker@.service ExecStart": "worker",
    }


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_every_flag_exists_as_written(command: CommandLine) -> None:
    parser = verb_parser(command.argv)
    flags = option_strings(parser)
    for word in command.argv:
        if word.startswith("--"):
            # written in full: argparse would also take an abbreviation, which a later flag breaks
            assert word.split("=", 1)[0] in flags, f"{command.where}: wiggle {command.argv[0]} has no {word}"
    try:
        parser.parse_args(command.argv[1:] if parser.prog != "wiggle" else command.argv)
    except SystemExit as exc:  # argparse refused it (and said why on stderr)
        raise AssertionError(f"{command.where}: `wiggle {' '.join(command.argv)}` does not parse") from exc


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_every_command_answers_help(command: CommandLine) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WIGGLE_")}
    done = subprocess.run(
        [*WIGGLE, *command.argv, "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: wiggle {command.argv[0]}") and "examples:" in done.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_every_variable_is_read_and_its_value_accepted(command: CommandLine) -> None:
    known = known_variables()
    for var in command.env:
        if not var.startswith("WIGGLE_"):
            continue
        assert var not in deprecated_variables(), f"{command.where}: {var} is deprecated"
        assert var in known, f"{command.where}: nothing in Wiggle reads {var}"
    env = command.env
    verb = command.argv[0]
    if verb in ("server", "migrate"):
        config = from_mapping({}, env=env)  # types and bounds, as `wiggle server` checks them
        assert config.database_url == env.get("WIGGLE_DATABASE_URL", "")
    if verb == "worker":
        args = verb_parser(command.argv).parse_args(command.argv[1:])
        options = options_from(args, env)  # flags over WIGGLE_WORKER_*, checked as the worker does
        if "WIGGLE_WORKER_CONCURRENCY" in env and "--concurrency" not in command.argv:
            assert options.concurrency == int(env["WIGGLE_WORKER_CONCURRENCY"])
        blueprints = command.argv[1:2] if len(command.argv) > 1 and ":" in command.argv[1] else []
        assert blueprints or env.get("WIGGLE_WORKER_BLUEPRINTS"), f"{command.where}: no blueprints"


def test_the_example_module_imports_and_builds_its_blueprints(monkeypatch: pytest.MonkeyPatch) -> None:
    from wiggle._cli.worker import blueprints_at

    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "shop_flows", raising=False)
    named = {c.argv[1] for c in COMMANDS if c.argv[0] == "worker" and len(c.argv) > 1}
    named |= {env_file(SYSTEMD / f"worker-{WORKER_INSTANCE}.env")["WIGGLE_WORKER_BLUEPRINTS"]}
    assert named == {"shop_flows:ALL"}
    found = blueprints_at("shop_flows:ALL")
    assert [bp.name for bp in found] == ["orders", "refunds"]
    assert all(isinstance(bp, Blueprint) for bp in found)
    # two queues: a fleet can be split (WIGGLE_WORKER_QUEUES=payments on some units)
    assert set().union(*(bp.queues() for bp in found)) == {"orders", "payments"}


# ------------------------------------------------------------------ Dockerfile


def test_dockerfile_stages_user_and_health() -> None:
    instructions = dockerfile_instructions()
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build") and froms[1].endswith(" AS runtime"), froms
    build, runtime = stages(instructions)
    assert any(k == "RUN" and r.startswith("pip wheel") for k, r in build)
    assert not any(k == "RUN" and ("gcc" in r or "pip wheel" in r) for k, r in runtime), (
        "no compiler at runtime"
    )
    copies = [rest for keyword, rest in runtime if keyword == "COPY"]
    assert any(c.startswith("--from=build ") for c in copies), "the runtime installs the build stage's wheels"
    (user,) = [rest for keyword, rest in runtime if keyword == "USER"]
    assert user.split(":")[0] not in ("root", "0"), user
    assert any(k == "RUN" and "useradd --system" in r for k, r in runtime)
    (health,) = [rest for keyword, rest in runtime if keyword == "HEALTHCHECK"]
    assert '["wiggle", "ready"' in health
    (stop,) = [rest for keyword, rest in runtime if keyword == "STOPSIGNAL"]
    assert stop == "SIGTERM"
    # every COPY source exists in the build context (the repository root)
    for keyword, rest in instructions:
        if keyword == "COPY" and not rest.startswith("--from"):
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    # the extras the image installs exist
    from importlib.metadata import metadata

    extras = set(metadata("wiggle-workflows").get_all("Provides-Extra") or [])
    for keyword, rest in instructions:
        for group in re.findall(r"wiggle-workflows\[([a-z,]+)\]|\"\.\[([a-z,]+)\]\"", rest):
            for name in ",".join(group).split(","):
                assert not name or name in extras, f"{keyword}: no extra {name!r}"


# ------------------------------------------------------------------ compose


def test_compose_references_only_what_it_defines() -> None:
    spec = compose()
    services = spec["services"]
    volumes = set(spec.get("volumes") or {})
    assert {"postgres", "migrate", "server-1", "server-2", "worker"} <= set(services)
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on undefined {dependency}"
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in volumes, f"{name} mounts undefined volume {source}"
        if "build" in service:
            context = (COMPOSE.parent / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]) == DOCKERFILE
        for port in service.get("ports") or []:
            assert re.fullmatch(r"\d+:\d+", str(port)), f"{name}: port {port!r}"
    # the two servers share one database, the worker knows both, the dashboards are published
    urls = {compose_env(services[s])["WIGGLE_DATABASE_URL"] for s in ("server-1", "server-2", "migrate")}
    assert len(urls) == 1 and "@postgres:5432/" in urls.pop()
    assert compose_env(services["worker"])["WIGGLE_TARGET"] == "server-1:7233,server-2:7233"
    published = {p for s in ("server-1", "server-2") for p in services[s]["ports"]}
    assert {"9464:9464", "9465:9464"} <= published
    # no two services publish one host port
    hosts = [str(p).split(":")[0] for s in services.values() for p in s.get("ports") or []]
    assert len(hosts) == len(set(hosts)), hosts


# ------------------------------------------------------------------ systemd


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", text)
    assert match, text
    return int(match.group(1)) * (60 if match.group(2) == "min" else 1)


def test_stop_timeouts_leave_room_for_the_drain() -> None:
    drain = WorkerOptions().drain_seconds  # running steps (Worker.close's default)
    hand_back = 5.0  # abandoned claims handed back after the drain (wiggle/_worker/poller.py stop)
    worker_stop = _seconds(unit_value("wiggle-worker@.service", "TimeoutStopSec")[0])
    assert drain + hand_back < worker_stop <= drain + hand_back + 15, worker_stop
    grace = inspect.signature(WiggleServer.stop).parameters["grace"].default
    server_stop = _seconds(unit_value("wiggle-server.service", "TimeoutStopSec")[0])
    assert grace < server_stop <= grace + 20
    services = compose()["services"]
    assert _seconds(services["worker"]["stop_grace_period"]) == worker_stop
    assert grace < _seconds(services["server-1"]["stop_grace_period"]) <= server_stop
    for unit in UNITS:
        assert unit_value(unit, "KillSignal") == ["SIGTERM"] and unit_value(unit, "KillMode") == ["mixed"]
        assert unit_value(unit, "Restart") == ["on-failure"]
        assert unit_value(unit, "User") == ["wiggle"] and unit_value(unit, "NoNewPrivileges") == ["yes"]
        assert unit_value(unit, "ProtectSystem") == ["strict"] and unit_value(unit, "EnvironmentFile")


def _systemd_analyze() -> str:
    found = shutil.which("systemd-analyze") or (
        "/usr/bin/systemd-analyze" if Path("/usr/bin/systemd-analyze").exists() else None
    )
    if found is None:
        message = "systemd-analyze is not installed (Debian: apt-get install systemd)"
        if os.environ.get("CI") or os.environ.get("WIGGLE_TEST_POSTGRES") == "1":
            pytest.fail(message + "; CI must verify the units")  # CI sets WIGGLE_TEST_POSTGRES=1
        pytest.skip(message)
    return found


def _units_here(folder: Path) -> list[Path]:
    """The units as installed, but running this environment's wiggle (systemd-analyze verify
    checks that ExecStart's program exists); the template as its `orders` instance."""
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        assert UNIT_WIGGLE in text
        (folder / name).write_text(
            text.replace(UNIT_WIGGLE, WIGGLE[0] if _wiggle.exists() else "/usr/bin/false")
        )
    instance = folder / f"wiggle-worker@{WORKER_INSTANCE}.service"
    instance.symlink_to(folder / "wiggle-worker@.service")
    return [folder / "wiggle-server.service", instance]


def test_systemd_units_verify(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    units = _units_here(tmp_path)
    done = subprocess.run([analyze, "verify", *map(str, units)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # a warning (an unknown key, a bad value) is not an error for verify: none is allowed here
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "wiggle" in line]
    assert ours == [], ours


def test_systemd_units_are_hardened(tmp_path: Path) -> None:
    analyze = _systemd_analyze()
    for unit in _units_here(tmp_path):
        done = subprocess.run(
            [analyze, "security", "--offline=yes", "--threshold=25", str(unit)],  # 25: exposure 2.5 of 10
            capture_output=True,
            text=True,
            timeout=120,
        )
        summary = [line for line in done.stdout.splitlines() if "Overall exposure level" in line]
        assert done.returncode == 0, summary or done.stdout[-2000:] + done.stderr
        assert summary and re.search(r"level for \S+: (\d+\.\d)", summary[0]), summary


def test_deploy_has_only_what_the_docs_describe() -> None:
    files = sorted(
        str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    assert files == [
        "Dockerfile",
        "Dockerfile.dockerignore",
        "compose.yaml",
        "example/shop_flows.py",
        "systemd/server.env",
        "systemd/wiggle-server.service",
        "systemd/wiggle-worker@.service",
        "systemd/worker-orders.env",
        "systemd/worker.env",
    ]
    docs = (ROOT / "docs" / "deployment.md").read_text()
    for name in files:
        assert Path(name).name in docs, f"docs/deployment.md does not mention {name}"
