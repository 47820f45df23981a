"""The blocking client is generated from the asyncio one and stays so.

Regenerate with python scripts/gen_sync_client.py after editing wiggle/_client/aio.py.
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from wiggle.client import AsyncClient, Client

ROOT = Path(__file__).resolve().parents[2]


def _generator():  # the script is not a package module; load it by path
    spec = importlib.util.spec_from_file_location("gen_sync_client", ROOT / "scripts" / "gen_sync_client.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sync_client_matches_its_source() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_sync_client.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generator_rewrites_and_refuses_what_it_cannot() -> None:
    gen = _generator()
    made = gen.generate('"""doc"""\nclass AsyncClient:\n    async def f(self):\n        return await g()\n')
    assert "class Client:" in made and "    def f(self):\n        return g()" in made
    assert "async" not in made.split('"""', 2)[2]
    with pytest.raises(SystemExit, match="async with"):
        gen.generate('"""doc"""\nasync def f():\n    async with x:\n        pass\n')


def test_same_methods_same_signatures() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, aio = public(Client), public(AsyncClient)
    assert sync.keys() == aio.keys()
    assert {
        "register",
        "start",
        "get",
        "wait",
        "result",
        "list",
        "cancel",
        "complete_user_task",
        "history",
    } <= set(sync)
    for name, signature in sync.items():
        assert signature == aio[name], name
        assert not inspect.iscoroutinefunction(getattr(Client, name)), name
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
