"""``upstream_python``: a python with upstream's published client, wiggle-client 0.1.1, installed.

That package's top-level module is also named ``wiggle``, so it never enters our venv: it lives
in a dedicated venv at the repo's .upstream-venv/ (git-ignored), built on first use and reused
while it still imports. It is built in a temporary folder beside it and renamed into place, so
no run ever sees a half-built venv (an interrupted build leaves only a temporary folder), and a
lock file serialises the check-and-build of two test runs at once.
The wheel is downloaded first and installed from the file, so pip records its sha256
(direct_url.json), which tests/upstream/test_proto_drift.py compares with ORIGIN.

When the venv cannot be built (no package index, say), the tests fail saying so: never a skip,
CI must notice.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg import STORES, TEST_DATABASE_URL, create_schema, drop_schema

from .servers import ServerProcess, server_env

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".upstream-venv"
LOCK = ROOT / ".upstream-venv.lock"
REQUIREMENT = "wiggle-client==0.1.1"
VERSION = REQUIREMENT.split("==")[1]

# run with -I (isolated: no cwd, no PYTHON* variables) so nothing of this checkout is imported
PROBE = (
    "import importlib.metadata as m, wiggle._proto.wiggle_pb2, wiggle._proto.wiggle_pb2_grpc; "
    "print(m.version('wiggle-client'))"
)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _usable(venv: Path) -> bool:
    python = _python(venv)
    if not python.exists():
        return False
    probe = subprocess.run([str(python), "-I", "-c", PROBE], capture_output=True, text=True, timeout=120)
    return probe.returncode == 0 and probe.stdout.strip() == VERSION


def _run(args: list[str], what: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(
            f"cannot build {VENV.name}/ with {REQUIREMENT}: {what} failed "
            f"(exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}",
            pytrace=False,
        )


def _build() -> None:
    build = Path(tempfile.mkdtemp(prefix=".upstream-venv-build-", dir=ROOT))  # same filesystem
    try:
        venv, wheels = build / "venv", build / "wheels"
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        pip = [str(_python(venv)), "-m", "pip"]
        _run([*pip, "download", "-q", "--no-deps", "-d", str(wheels), REQUIREMENT], "pip download")
        (wheel,) = wheels.glob("*.whl")
        _run([*pip, "install", "-q", str(wheel)], "pip install")
        if not _usable(venv):
            pytest.fail(f"the venv built for {REQUIREMENT} does not import it", pytrace=False)
        os.rename(venv, VENV)  # atomic
    finally:
        shutil.rmtree(build, ignore_errors=True)


@pytest.fixture(scope="session")
def upstream_python() -> Path:
    """The path of a python that imports wiggle-client 0.1.1 (and only it as ``wiggle``)."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        if not _usable(VENV):
            if VENV.exists():  # a broken leftover: move it aside atomically, then delete it
                stale = Path(tempfile.mkdtemp(prefix=".upstream-venv-stale-", dir=ROOT))
                os.rename(VENV, stale / "venv")
                shutil.rmtree(stale, ignore_errors=True)
            _build()
    return _python(VENV)


#: "memory" always; "postgres" when WIGGLE_TEST_POSTGRES=1 (as CI sets: tests/conformance/conftest.py)


@pytest.fixture(params=STORES)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server process on the memory store, or on PostgreSQL in a schema of its own."""
    schema = ""
    settings: dict[str, str] = {}
    if request.param == "postgres":
        schema = create_schema()
        settings = {"WIGGLE_DATABASE_URL": TEST_DATABASE_URL, "WIGGLE_DATABASE_SCHEMA": schema}
    proc = ServerProcess(tmp_path / "server.log", server_env(**settings))
    try:
        yield proc
    finally:
        proc.stop()
        if schema:
            drop_schema(schema)
