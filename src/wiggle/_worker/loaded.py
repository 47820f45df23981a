"""A blueprint as a worker holds it: ``LoadedBlueprint`` (its compiled graph, its nodes and their
limits) and the context type each of its handlers is given (``handler_context_type``,
``typed_context``).

A handler receives its context as the blueprint's context type (a ``msgspec.Struct`` or a dict), or
as the type its first parameter asks for; wiggle/_worker/handlers.py calls it with that.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from .. import _fast
from .._model import NodeKind
from ..workflow import Blueprint
from .outcomes import Context, ContextMismatch

__all__ = ["Handler", "LoadedBlueprint", "handler_context_type", "typed_context"]

#: A user's handler, as a blueprint holds it (its argument types are the blueprint's context type).
Handler = Callable[..., Any]


class LoadedBlueprint:
    """A blueprint with what the worker needs at hand: its compiled graph and its nodes."""

    __slots__ = (
        "blueprint",
        "graph",
        "nodes",
        "timeouts",
        "heartbeat_timeouts",
        "flush_around",
        "context_types",
        "mismatch_hint",
    )

    def __init__(self, blueprint: Blueprint[Any]) -> None:
        self.blueprint = blueprint
        # node id -> the context type its handler is given (``handler_context_type``)
        self.context_types = {
            node: handler_context_type(fn, blueprint.context_type)
            for node, (_, fn) in blueprint.handlers.items()
        }
        self.mismatch_hint = (
            " (a for_each body's steps get the fork-time context without its list, plus the element "
            "and its index: annotate their handler's parameter with dict or a Struct of those fields)"
            if any(n.kind == NodeKind.FOR_EACH for n in blueprint.definition.nodes)
            else ""
        )
        self.graph = _fast.CompiledGraph(blueprint.definition)
        self.nodes = blueprint.definition.node_map()
        # node id -> its start-to-close limit in ms, for the steps that have one
        self.timeouts = {n.id: n.timeout_millis for n in blueprint.definition.nodes if n.timeout_millis}
        # node id -> its heartbeat timeout in ms (its lease), for the steps that have one
        nodes = blueprint.definition.nodes
        self.heartbeat_timeouts = {
            n.id: n.heartbeat_timeout_millis for n in nodes if n.heartbeat_timeout_millis
        }
        # the steps a LOCAL_ASYNC run flushes before and after, so that the server holds the step's
        # own limits while it runs (docs/semantics.md#step-time-limits)
        self.flush_around = frozenset(self.timeouts) | frozenset(self.heartbeat_timeouts)


def typed_context(value: Context, ctype: type[Any], hint: str = "") -> object:
    """The context as the handler's context type (a copy when the type is dict); ContextMismatch
    naming the field when it does not fit (``hint``: what to add to its message)."""
    if ctype is dict:
        return dict(value)
    try:
        return msgspec.convert(value, ctype)
    except msgspec.ValidationError as exc:
        raise ContextMismatch(
            f"the context does not fit {ctype.__name__}: {exc} (the start's context or an earlier "
            f"step's result put it there; another attempt would meet the same context){hint}"
        ) from None


def handler_context_type(fn: Handler, default: type[Any]) -> type[Any]:
    """The context type ``fn`` is given: what its first parameter's annotation asks for, a msgspec
    Struct subclass or a dict (``dict``, ``dict[str, X]``, a Mapping); else (no annotation, another
    one, or one that does not resolve) the workflow's ``default``.

    A Struct-typed workflow's for_each body gets a context its Struct rarely fits (the fork-time
    context without the list, plus the element and its index): its handlers say dict, or a Struct
    of their own, and get that. A dict-typed workflow's handler annotated with a Struct gets its
    context as one."""
    try:
        hints = typing.get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    except Exception:  # noqa: BLE001 (a partial, a builtin, a forward reference: the default)
        return default
    if not params or params[0].name not in hints:
        return default
    wanted = hints[params[0].name]
    origin = typing.get_origin(wanted) or wanted
    if isinstance(origin, type):
        if issubclass(origin, msgspec.Struct):
            return origin
        if origin is dict or origin in (collections.abc.Mapping, collections.abc.MutableMapping):
            return dict
    return default
