"""The test kit's three faces offer the same API (drift test): WorkflowEnvironment (async),
SyncWorkflowEnvironment (blocking) and AsyncView (``wiggle_env.aio``, awaitable from any loop)."""

from __future__ import annotations

import inspect

from wiggle.testing import AsyncView, SyncWorkflowEnvironment, WorkflowEnvironment

#: What AsyncView leaves out on purpose: the environment's lifecycle belongs to the fixture that
#: owns it. Everything else is there, so an async test never falls back on the sync object.
NOT_ON_THE_VIEW = {"start", "stop"}


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_")
    }


def _properties(cls: type) -> set[str]:
    return {name for name, member in inspect.getmembers(cls) if isinstance(member, property)}


def _shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    """Names, kinds and defaults: what a caller relies on (annotations may name aliases)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_the_sync_environment_has_every_method_of_the_async_one_with_the_same_parameters() -> None:
    env, sync = _public(WorkflowEnvironment), _public(SyncWorkflowEnvironment)
    assert set(env) == set(sync)
    for name, signature in env.items():
        assert _shape(signature) == _shape(sync[name]), name


def test_the_async_view_has_every_method_with_the_same_parameters() -> None:
    env, view = _public(WorkflowEnvironment), _public(AsyncView)
    assert set(view) == set(env) - NOT_ON_THE_VIEW
    for name, signature in view.items():
        assert _shape(signature) == _shape(env[name]), name
        # a coroutine of the environment's is one on the view; a clock read is a plain call on both
        wanted = inspect.iscoroutinefunction(getattr(WorkflowEnvironment, name))
        assert inspect.iscoroutinefunction(getattr(AsyncView, name)) == wanted, name


def test_every_face_has_the_environment_s_properties() -> None:
    assert _properties(WorkflowEnvironment) == {"target", "client"}
    assert _properties(WorkflowEnvironment) <= _properties(AsyncView)
    assert _properties(WorkflowEnvironment) <= _properties(SyncWorkflowEnvironment)


def test_the_start_options_the_test_kit_forwards_are_the_clients() -> None:
    """``start_workflow(**options)`` forwards StartOptions to ``AsyncClient.start``: its keys are
    the client's keyword-only start options, with the client's defaults."""
    import typing

    from wiggle import AsyncClient
    from wiggle._client.types import StartOptions

    params = inspect.signature(AsyncClient.start).parameters
    skip = {"self", "workflow", "context", "version", "correlation_id", "request_id"}
    client_options = {name for name in params if name not in skip}
    assert set(typing.get_type_hints(StartOptions, globalns=vars(__import__("datetime")))) == client_options
