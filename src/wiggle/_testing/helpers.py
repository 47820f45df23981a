"""Test helpers that need no server: replace one step's function, read the path an instance took."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .._workflow_branch import _check_not_generator, _check_one_argument
from .._workflow_compile import HandlerKind
from ..client import HistoryEntry
from ..workflow import Blueprint, Workflow

__all__ = ["mock_step", "path_of"]

C = TypeVar("C")


def mock_step(blueprint: Blueprint[C], step: str, fn: Callable[..., Any]) -> Blueprint[C]:
    """A copy of ``blueprint`` whose step ``step`` runs ``fn`` instead (same definition and version).

    The workflow is not edited: the server sees the same definition, only the worker that is
    given the copy calls ``fn`` (sync or async, with the step's usual arguments).

    ``fn`` meets the checks ``Workflow.step()`` makes of a handler (wiggle/_workflow_branch.py:
    callable with the context alone, not a generator function; a join's ``combine``, not a
    generator function), InvalidArgument otherwise: unchecked, ``lambda ctx, amount: ...`` or a
    generator function was taken and every attempt of the step failed.
    """
    if not isinstance(blueprint, Blueprint):
        hint = " (the workflow's name): pass the built Blueprint" if isinstance(blueprint, str) else ""
        if isinstance(blueprint, Workflow):
            hint = ": call .build() on it and pass the Blueprint"
        raise TypeError(f"mock_step takes a Blueprint, got {type(blueprint).__name__} {blueprint!r}{hint}")
    if step not in blueprint.handlers:
        names = ", ".join(sorted(blueprint.handlers)) or "none"
        raise KeyError(f"workflow {blueprint.name!r} has no step {step!r} to mock; its steps: {names}")
    if not callable(fn):
        raise TypeError(f"the mock for step {step!r} must be callable, not {type(fn).__name__}")
    handlers = dict(blueprint.handlers)
    kind, _ = handlers[step]
    if kind == HandlerKind.COMBINE:  # combine(base, [branch contexts]), as .join() checks it
        _check_not_generator(fn, f"join {step!r}")
    else:
        _check_one_argument(fn, step)
    handlers[step] = (kind, fn)
    return Blueprint(blueprint.definition, handlers, blueprint.context_type)


def path_of(history: Iterable[HistoryEntry]) -> list[str]:
    """The nodes visited in ``history``, in the order the visits began: the entries of one token
    at one node until it moves on (its attempts, a sub-workflow's start and end) are one visit.

    Parallel branches interleave their entries (a fork's step retried after the other branch's
    step ran, a for_each's sub-workflows started before any ended), so a visit is told by each
    token's own last node, not by the entry before: merging consecutive entries only counted
    such a visit twice (``['fork', 'flaky', 'other', 'flaky', ...]``, an outside trial). A token
    that comes back to a node later (a loop) visits it again.
    """
    path: list[str] = []
    at: dict[str, str] = {}  # each token's node (the visit it is in)
    for entry in history:
        if at.get(entry.token_id) != entry.node_id:
            path.append(entry.node_id)
            at[entry.token_id] = entry.node_id
    return path
