"""The test kit's own tests run over store x execution mode, like tests/conformance.

"memory" always; "postgres" when WIGGLE_TEST_POSTGRES=1 (each environment in a schema of its own,
dropped when it stops).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from pg import STORES

from wiggle import ExecutionMode, Workflow
from wiggle.testing import WorkflowEnvironment

POSTGRES_URL = os.environ.get("WIGGLE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
MODES = [ExecutionMode.SERVER, ExecutionMode.LOCAL_SYNC, ExecutionMode.LOCAL_ASYNC]


class Kit:
    """Builds environments and workflows for one (store, mode)."""

    def __init__(self, store: str, mode: ExecutionMode) -> None:
        self.store = store
        self.mode = mode

    def __repr__(self) -> str:
        return f"<Kit {self.store} {self.mode.value}>"

    def env(self, workflows: Any = (), **settings: Any) -> WorkflowEnvironment:
        """A WorkflowEnvironment on this kit's store (use ``async with``)."""
        if self.store == "postgres":
            settings.setdefault("database_url", POSTGRES_URL)
        return WorkflowEnvironment(workflows, **settings)

    def define(self, base: str) -> Workflow[Any]:
        """A workflow named uniquely, in this kit's mode."""
        return Workflow.define(f"{base}-{uuid.uuid4().hex[:8]}").execution(self.mode)


@pytest.fixture(params=[(s, m) for s in STORES for m in MODES], ids=lambda p: f"{p[0]}-{p[1].value}")
def kit(request: pytest.FixtureRequest) -> Kit:
    """One (store, execution mode) combination."""
    store, mode = request.param
    return Kit(store, mode)
