"""Generate the blocking client (src/wiggle/_client/sync.py) from the asyncio one (aio.py).

Usage: python scripts/gen_sync_client.py [--check]
--check exits 1 if the committed sync.py differs from what this script makes
(tests/server/test_client_drift.py runs it). The idea is psycopg's tools/async_to_sync.py, at
the scale of one file: AsyncClient is written with a small, fixed vocabulary of async constructs,
and each has one textual rewrite below. A construct outside that vocabulary fails the check
rather than producing a client that blocks the wrong way.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "wiggle" / "_client" / "aio.py"
TARGET = ROOT / "src" / "wiggle" / "_client" / "sync.py"

HEADER = '''"""The blocking client, ``Client``: generated, do not edit.

Made by scripts/gen_sync_client.py from wiggle/_client/aio.py (the asyncio client, which is the
source of truth); tests/server/test_client_drift.py fails when the two drift apart.
"""
'''

# (pattern, replacement), applied in order to everything after the module docstring.
REWRITES: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
    (r"\bAsyncClient\b", "Client"),
    (r"\bAsyncStartBatcher\b", "StartBatcher"),  # wiggle/_client/batching.py
    (r"\bAsyncStartStream\b", "StartStream"),  # wiggle/_client/start_stream.py
    (r"\bAsyncLink\b", "Link"),  # wiggle/_client/link.py
    (r"\bcore\.apause\b", "core.pause"),  # wiggle/_client/core.py
    (r"\bgrpc\.aio\.Channel\b", "grpc.Channel"),
    (r"\bgrpc\.aio\.insecure_channel\b", "grpc.insecure_channel"),
    (r"\bgrpc\.aio\.secure_channel\b", "grpc.secure_channel"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
]
# Async constructs the rewrites above do not cover: finding one is an error, not a silent copy.
UNSUPPORTED = [r"\basync (with|for)\b", r"\basyncio\b", r"\bgrpc\.aio\b", r"\bawait\b"]


def generate(source: str) -> str:
    """The sync module for the text of aio.py."""
    match = re.match(r'\s*""".*?"""\n', source, re.DOTALL)
    if match is None:
        raise SystemExit(f"{SOURCE} must start with a module docstring")
    body = source[match.end() :]
    for pattern, replacement in REWRITES:
        body = re.sub(pattern, replacement, body)
    for pattern in UNSUPPORTED:
        found = re.search(pattern, body)
        if found:
            line = body[: found.start()].count("\n") + match.group(0).count("\n") + 1
            raise SystemExit(f"{SOURCE}:{line}: {found.group(0)!r} has no sync rewrite in {__file__}")
    return HEADER + body


def main(argv: list[str]) -> int:
    """Write sync.py, or with --check compare it; returns the exit code."""
    made = generate(SOURCE.read_text())
    if "--check" in argv:
        if TARGET.read_text() != made:
            print(f"{TARGET} is out of date; run: python scripts/gen_sync_client.py")
            return 1
        return 0
    TARGET.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
