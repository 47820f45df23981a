"""The pytest plugin (registered through the ``pytest11`` entry point: installing wiggle is enough).

Fixtures, each a started ``wiggle.testing.SyncWorkflowEnvironment`` on a virtual clock:

- ``wiggle_env``         one per test
- ``wiggle_module_env``  one per test module (shared by its tests; instances and time accumulate)

Both work in plain sync tests (``wiggle_env.run(bp, ctx)``) and in async ones, with pytest-asyncio
or any other loop (``await wiggle_env.aio.run(bp, ctx)``). Configure them with the ``wiggle``
marker, whose keyword arguments go to ``WorkflowEnvironment`` (on the test for ``wiggle_env``, on
the module's ``pytestmark`` for ``wiggle_module_env``)::

    @pytest.mark.wiggle(workflows=[orders], execution_mode="LOCAL_SYNC", workers=2)
    def test_orders(wiggle_env): ...

``--wiggle-database-url`` (or the ``wiggle_database_url`` ini value) runs every environment on PostgreSQL instead of the memory store, each in a schema of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the kit imports gRPC: loaded only when a fixture is used
    from .testing import SyncWorkflowEnvironment

__all__ = ["wiggle_env", "wiggle_module_env"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """--wiggle-database-url and the wiggle_database_url ini value."""
    group = parser.getgroup("wiggle")
    group.addoption(
        "--wiggle-database-url",
        default=None,
        help="run wiggle test environments on this PostgreSQL database (default: the memory store)",
    )
    parser.addini("wiggle_database_url", "PostgreSQL URL for wiggle test environments", default="")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``wiggle`` marker."""
    config.addinivalue_line(
        "markers", "wiggle(**settings): settings of the wiggle_env / wiggle_module_env test environment"
    )


def _environment(request: pytest.FixtureRequest) -> SyncWorkflowEnvironment:
    from .testing import SyncWorkflowEnvironment

    marker = request.node.get_closest_marker("wiggle")
    settings: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        raise pytest.UsageError(
            f"@pytest.mark.wiggle takes keyword arguments only (workflows=[...], ...), got {marker.args!r}"
        )
    url = request.config.getoption("--wiggle-database-url") or request.config.getini("wiggle_database_url")
    if url:
        settings.setdefault("database_url", url)
    workflows = settings.pop("workflows", ())
    return SyncWorkflowEnvironment(workflows, **settings)


@pytest.fixture
def wiggle_env(request: pytest.FixtureRequest) -> Iterator[SyncWorkflowEnvironment]:
    """A started test environment for this test (settings from its ``wiggle`` marker)."""
    with _environment(request) as env:
        yield env


@pytest.fixture(scope="module")
def wiggle_module_env(request: pytest.FixtureRequest) -> Iterator[SyncWorkflowEnvironment]:
    """A started test environment shared by this module's tests (settings from ``pytestmark``)."""
    with _environment(request) as env:
        yield env
