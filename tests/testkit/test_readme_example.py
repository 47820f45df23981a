"""The README's "Testing your workflows" example, run as a user would: pytest on the file.

Verbatim, in a directory of its own, with no pytest configuration (the repository's
``asyncio_mode = "auto"`` must not leak in): its ``async def`` test runs because wiggle's pytest
plugin runs coroutine tests that use its fixtures, whatever pytest-asyncio's mode.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_example_passes(tmp_path: Path) -> None:
    section = README.read_text().split("## Testing your workflows", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, "the section has no python example"
    (tmp_path / "test_orders.py").write_text(code.group(1))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the user's defaults: no asyncio_mode
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            str(tmp_path / "pytest.ini"),
            "test_orders.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout, run.stdout


def test_the_readme_schedule_snippet_passes() -> None:
    from datetime import timedelta

    from wiggle import Workflow
    from wiggle.testing import SyncWorkflowEnvironment

    section = README.read_text().split("## Testing your workflows", 1)[1].split("\n## ", 1)[0]
    snippets = [s for s in re.findall(r"```python\n(.*?)```", section, re.S) if "create_schedule" in s]
    assert len(snippets) == 1, "the section should show one schedule snippet"
    snippet = "\n".join(line.strip() for line in snippets[0].splitlines())  # indented in a list

    def work(ctx):
        return {**ctx, "reported": True}

    report = Workflow.define("report").step(work).build()
    with SyncWorkflowEnvironment([report]) as env:
        scope = {"env": env, "report": report, "timedelta": timedelta}
        exec(compile(snippet, "README.md", "exec"), scope)  # the snippet's asserts are the test
        page, _ = env.client.list(workflow=report.name)
    assert len(page) == 3
