"""The image's build stage, without Docker: its COPY lines (minus deploy/Dockerfile.dockerignore)
gathered into a folder, and the wheel built there as the stage builds it. Every file of the
package the checkout tracks is in the wheel, and no local build output is."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from .recipe_files import DEPLOY, ROOT, stages

IGNORE = DEPLOY / "Dockerfile.dockerignore"


def _ignored(relative: Path, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, pattern[3:]) for part in relative.parts):
                return True
        elif relative.parts[0] == pattern:
            return True
    return False


def _build_context(folder: Path) -> list[str]:
    """The build stage's COPY sources copied into ``folder`` as Docker would; the pip command."""
    patterns = [
        line.strip() for line in IGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    build = stages()[0]
    for keyword, rest in build:
        if keyword != "COPY":
            continue
        *sources, destination = rest.split()
        for source in sources:
            for path in [ROOT / source] if (ROOT / source).is_file() else sorted((ROOT / source).rglob("*")):
                relative = path.relative_to(ROOT)
                if path.is_file() and not _ignored(relative, patterns):
                    target = folder / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
        assert destination in ("./", "./src"), destination  # the WORKDIR, laid out as the repository
    (pip,) = [rest for keyword, rest in build if keyword == "RUN" and rest.startswith("pip wheel")]
    return pip.split()


def test_the_build_stage_makes_a_complete_wheel(tmp_path: Path) -> None:
    context = tmp_path / "src"
    command = _build_context(context)
    assert command[:2] == ["pip", "wheel"] and command[-1] == '".[postgres,dashboard]"', command
    # the stage's own command, without the dependencies' wheels (the index's business) and pure
    # (WIGGLE_IMPL=python: the compiled build is CI's wheel job); the file set is what is checked
    out = tmp_path / "wheels"
    env = {**os.environ, "WIGGLE_IMPL": "python"}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), "."],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("wiggle_workflows-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "ls-files", "src/wiggle"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = {
        name.removeprefix("src/")
        for name in tracked
        if name.endswith((".py", ".pyi", ".pyx", ".sql", "py.typed"))
    }
    assert wanted and wanted <= names, sorted(wanted - names)[:20]
    assert not [n for n in names if n.endswith((".so", ".c", ".pyc"))]
