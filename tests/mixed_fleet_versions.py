"""Two versions of one workflow for mixed-fleet tests: the new one adds the step "extra" after
"first" (docs/semantics.md#mixed-fleets)."""

from __future__ import annotations

from typing import Any

from wiggle import Workflow


def first(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "first": True}


def extra(ctx: dict[str, Any]) -> dict[str, Any]:
    return {**ctx, "extra": True}


def mixed_versions(name: str) -> tuple[Any, Any]:
    """(old, new) blueprints of the workflow ``name``: old runs "first", new "first" then "extra"."""
    old = Workflow.define(name, dict).step(first).build()
    new = Workflow.define(name, dict).step(first).step(extra).build()
    return old, new
