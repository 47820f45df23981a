"""docs/troubleshooting.md says its "Log lines" tables hold every line a server or worker may log
at WARNING or above. An outside trial found lines of Wiggle's (`queue-lag check failed`, the clock
leader's `lost the clock duties`) and of its libraries missing: this holds the tables to the code's
``log.warning``/``log.error``/``log.exception`` calls, and to the library lines an operator sees."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "troubleshooting.md").read_text()
LOUD = {"warning", "error", "exception", "critical"}

#: Lines the libraries log (psycopg, its pool, gRPC core on stderr), as the trial saw them.
LIBRARY_LINES = [
    "psycopg.pool: discarding broken connection",
    "psycopg.pool: error connecting in 'wiggle-…'",
    "psycopg.pool: reconnection attempt in pool 'wiggle-…' failed after 2.0 sec",
    "psycopg: error ignored in rollback on",
    "cannot exit pipeline mode while busy",
    "add_port.cc:83] Failed to add port",
    "GOAWAY ... ping_timeout",
]


def _loud_calls() -> list[tuple[str, int, str]]:
    """(file, line, the format string's text before its first placeholder) of each such call."""
    found = []
    for path in sorted((ROOT / "src" / "wiggle").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LOUD
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "log"
                and node.args
            ):
                continue
            first = node.args[0]
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            head = re.split(r"%[-0-9.]*[sdrfg]", text)[0].strip()
            found.append((str(path.relative_to(ROOT)), node.lineno, head[:25]))
    return found


def test_every_loud_log_call_has_a_row() -> None:
    calls = _loud_calls()
    assert len(calls) > 50, calls  # the scan finds the calls
    # a call whose text begins with its placeholder ("%s") cannot be matched: it is left out
    missing = [(path, line, head) for path, line, head in calls if head and head not in DOC]
    assert not missing, f"log lines without a row in docs/troubleshooting.md: {missing}"


def test_the_library_lines_have_rows() -> None:
    missing = [line for line in LIBRARY_LINES if line not in DOC]
    assert not missing, missing
