"""``wiggle worker --help`` points at the page that says what each option does.

It said ``WorkerOptions`` (README, "Worker options"), a section that moved to
docs/configuration.md#worker-options (an outside trial looked for it in the README).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _anchor(heading: str) -> str:
    """The anchor mkdocs makes of a heading (toc's default slugify, for plain words)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def test_worker_help_names_the_docs_section_of_its_options() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "wiggle.cli", "worker", "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())  # argparse wraps the description
    pointer = (
        'What each option does: ``WorkerOptions`` (docs/configuration.md#worker-options, "Worker options").'
    )
    assert pointer in text, text
    assert "README" not in text, text
    for page, anchor in re.findall(r"docs/([\w-]+\.md)#([\w-]+)", text):
        headings = re.findall(r"^#+ (.+)$", (DOCS / page).read_text(), re.M)
        assert anchor in {_anchor(h) for h in headings}, (page, anchor)
