"""User code checked by ``mypy --strict`` (the test extra installs mypy): what is
correct passes without annotations or casts, and what fails at run time fails here first.

- ``bp = Workflow.define("x").step(f).build()`` needed an annotation ("Need type annotation for
  'bp'"): the default context is ``dict[str, Any]``;
- ``Workflow.define("td", SomeTypedDict)`` and a dataclass passed, then failed at run time
  ("context type must be dict or a msgspec.Struct subclass");
- ``create_schedule(..., every=timedelta(days=1))`` and ``result(info)``, ``get(info)``,
  ``cancel(info)``... were errors, though the clients take them (tests/server/test_client_arguments.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CORRECT = """
from datetime import timedelta
from typing import Any

import msgspec

from wiggle import AsyncClient, Blueprint, Client, InstanceInfo, SignalResult, Workflow


class Order(msgspec.Struct):
    quantity: int


def price(order: Order) -> Order:
    return order


def tidy(ctx: dict[str, Any]) -> dict[str, Any]:
    return ctx


plain = Workflow.define("plain").step(tidy).build()
as_dict = Workflow.define("as-dict", dict).step(tidy).build()
typed = Workflow.define("typed", Order).step(price).build()
limited = Workflow.define("limited", timeout=timedelta(hours=1)).step(tidy).build()
check_plain: Blueprint[dict[str, Any]] = plain
check_dict: Blueprint[dict[str, Any]] = as_dict
check_typed: Blueprint[Order] = typed


def blocking(client: Client) -> None:
    info = client.start(plain, {"n": 1})
    client.create_schedule("daily", plain, {}, every=timedelta(days=1))
    client.update_schedule("daily", plain, {}, every=3600)
    done: InstanceInfo = client.result(info, timeout=timedelta(minutes=1))
    client.wait(done, 5)
    client.get(info)
    client.cancel(info)
    client.history(info)
    client.complete_user_task(info, "approve")
    sent: SignalResult = client.signal(info, "go")
    client.retry(info)
    Client(patience=timedelta(seconds=5))


async def in_async(client: AsyncClient) -> None:
    info = await client.start(typed, Order(quantity=1))
    await client.create_schedule("daily", typed, {"quantity": 1}, every=timedelta(days=1))
    await client.result(info, timedelta(seconds=30))
    await client.cancel(info)
"""

WRONG = """
from dataclasses import dataclass
from typing import TypedDict

from wiggle import Workflow


class Shape(TypedDict):
    quantity: int


@dataclass
class Record:
    quantity: int


by_typed_dict = Workflow.define("td", Shape)
by_dataclass = Workflow.define("dc", Record)
"""


def _mypy(tmp_path: Path, name: str, code: str) -> tuple[str, int]:
    """mypy (the test extra has it: never skipped) on ``code``, in a process of its own: run in the
    test's process it raises the recursion limit for good (mypy/main.py), and a later test of the
    same pytest-xdist worker that counts on the usual limit (tests/upstream/test_values.py, deep
    nesting refused) no longer met it."""
    source = tmp_path / f"{name}.py"
    source.write_text(textwrap.dedent(code))
    # errors of the user file only: wiggle itself is checked by the lint step (mypy src)
    options = ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache")]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *options, str(source)], capture_output=True, text=True, timeout=600
    )
    return done.stdout + done.stderr, done.returncode


def test_correct_user_code_passes_mypy_strict_without_annotations(tmp_path: Path) -> None:
    out, status = _mypy(tmp_path, "correct", CORRECT)
    assert status == 0, out


def test_a_context_type_the_runtime_refuses_is_a_type_error(tmp_path: Path) -> None:
    out, status = _mypy(tmp_path, "wrong", WRONG)
    assert status == 1, out
    lines = [line for line in out.splitlines() if ": error:" in line]
    assert len(lines) == 2, out
    assert '"type[Shape]"' in lines[0] and '"type[Record]"' in lines[1], out
