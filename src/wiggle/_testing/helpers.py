"""Test helpers that need no server: replace one step's function, read the path an instance took."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..client import HistoryEntry
from ..workflow import Blueprint

__all__ = ["mock_step", "path_of"]

C = TypeVar("C")


def mock_step(blueprint: Blueprint[C], step: str, fn: Callable[..., Any]) -> Blueprint[C]:
    """A copy of ``blueprint`` whose step ``step`` runs ``fn`` instead (same definition and version).

    The workflow is not edited: the server sees the same definition, only the worker that is
    given the copy calls ``fn`` (sync or async, with the step's usual arguments).
    """
    if step not in blueprint.handlers:
        names = ", ".join(sorted(blueprint.handlers)) or "none"
        raise KeyError(f"workflow {blueprint.name!r} has no step {step!r} to mock; its steps: {names}")
    if not callable(fn):
        raise TypeError(f"the mock for step {step!r} must be callable, not {type(fn).__name__}")
    handlers = dict(blueprint.handlers)
    kind, _ = handlers[step]
    handlers[step] = (kind, fn)
    return Blueprint(blueprint.definition, handlers, blueprint.context_type)


def path_of(history: Iterable[HistoryEntry]) -> list[str]:
    """The nodes visited in ``history``, in order: consecutive entries of one token at one node
    (its attempts) count once."""
    path: list[str] = []
    last: tuple[str, str] | None = None
    for entry in history:
        key = (entry.token_id, entry.node_id)
        if key != last:
            path.append(entry.node_id)
            last = key
    return path
