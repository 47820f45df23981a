"""The README's time-limits example, saved as the file it names and run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_time_limits_example_runs_as_written(tmp_path: Path) -> None:
    section = README.read_text().split("## Time limits and flow control", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "the README's Time limits section has no python block"
    code = block.group(1)
    name = code.splitlines()[0].removeprefix("# ").strip()
    assert name == "time_limits.py"
    (tmp_path / name).write_text(code)
    run = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == "True 6"
