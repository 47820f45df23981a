"""The pytest plugin (registered through the ``pytest11`` entry point: installing wiggle is enough).

Fixtures, each a started ``wiggle.testing.SyncWorkflowEnvironment`` on a virtual clock:

- ``wiggle_env``: one per test
- ``wiggle_module_env``: one per test module (shared by its tests; instances and time accumulate);
  under pytest-xdist one per module in each xdist worker (a module scope is per process), so
  tests that build on each other need their module on one worker (``--dist loadscope``)

Both work in plain sync tests (``wiggle_env.run(bp, ctx)``) and in async ones, with pytest-asyncio
or any other loop (``await wiggle_env.aio.run(bp, ctx)``). An ``async def`` test that requests one
of them needs no async plugin: unless one (pytest-asyncio, anyio...) has taken it, this plugin runs
it on an event loop of its own (``asyncio.run``). Configure them with the ``wiggle``
marker, whose keyword arguments go to ``WorkflowEnvironment`` (on the test for ``wiggle_env``, on
the module's ``pytestmark`` for ``wiggle_module_env``: a test of that fixture that carries a
marker of its own fails at its setup, saying where the marker goes):

```python
@pytest.mark.wiggle(workflows=[orders], execution_mode="LOCAL_SYNC", workers=2)
def test_orders(wiggle_env): ...
```

``--wiggle-database-url`` (or the ``wiggle_database_url`` ini value) runs every environment on PostgreSQL instead of the memory store, each in a schema of its own.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the kit imports gRPC: loaded only when a fixture is used
    from .testing import SyncWorkflowEnvironment

__all__ = ["wiggle_env", "wiggle_module_env"]

FIXTURES = frozenset(__all__)


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


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run an ``async def`` test that requests a wiggle fixture, when no async plugin took it.

    pytest-asyncio (a test it runs: marked, or in auto mode) has replaced the coroutine function
    by a sync wrapper before this hook looks, and anyio's hook runs first and stops the call: the
    tests they own are left to them. Any other coroutine test using ``wiggle_env`` or
    ``wiggle_module_env`` runs here, on a new event loop (the fixtures' ``.aio`` methods can be
    awaited from any loop), instead of failing with "async def functions are not natively
    supported".
    """
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function) or not FIXTURES.intersection(pyfuncitem.fixturenames):
        return None
    funcargs = pyfuncitem.funcargs
    arguments = {name: funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(function(**arguments))
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test that uses ``wiggle_module_env`` and carries a ``wiggle`` marker of its own.

    The module's environment is made once, from the module's marker (``pytestmark``), before
    its first test: a marker on a test (or on its class, or a ``pytest.param``'s) reaches it
    never. Before, such a test ran on an environment without its workflows, and a wait timed
    out naming a queue "no worker of this environment serves" (an outside trial)."""
    names = getattr(item, "fixturenames", ())
    if "wiggle_module_env" not in names or "wiggle_env" in names:  # wiggle_env reads the test's
        return
    module = item.getparent(pytest.Module)
    above = set(module.listchain()) if module is not None else set()
    own = [mark for node, mark in item.iter_markers_with_node("wiggle") if node not in above]
    if own:
        settings = ", ".join(f"{key}=..." for key in own[0].kwargs) or "..."
        pytest.fail(
            f"{item.name} uses wiggle_module_env and has a @pytest.mark.wiggle({settings}) of its own, "
            "which that fixture never reads: its environment is made once for the module, from the "
            "module's marker. Put the marker on the module (pytestmark = pytest.mark.wiggle(...)), "
            "or use the wiggle_env fixture (one environment per test, configured by the test's marker)",
            pytrace=False,
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
    """A started test environment shared by this module's tests (settings from ``pytestmark``).

    Under pytest-xdist each worker process that runs tests of the module makes its own.
    """
    with _environment(request) as env:
        yield env
