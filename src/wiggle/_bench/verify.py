"""Verification: every instance a run started finished COMPLETED with exactly the expected context.

A run that fails verification reports what was wrong (naming instances) and no figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wiggle import InstanceInfo

__all__ = ["verify"]


def verify(
    infos: Sequence[InstanceInfo],
    instance_ids: Mapping[str, int],
    workflow: str,
    steps: int,
    expected_context: Callable[[int, int], dict[str, Any]],
) -> list[str]:
    """The problems found (empty: verified).

    ``infos`` are the instances listed for ``workflow`` after the run; ``instance_ids`` maps each
    instance the run started to its ``n``, and ``expected_context(n, steps)`` is its final context.
    """
    problems: list[str] = []
    seen: dict[str, InstanceInfo] = {}
    for info in infos:
        seen[info.instance_id] = info
    missing = [i for i in instance_ids if i not in seen]
    extra = [i for i in seen if i not in instance_ids]
    if len(infos) != len(seen):
        problems.append(f"ListInstances returned {len(infos)} rows for {len(seen)} distinct instances")
    if missing:
        problems.append(f"{len(missing)} submitted instance(s) not listed, e.g. {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} unexpected instance(s) of {workflow}, e.g. {extra[:3]}")
    wrong_status: list[str] = []
    wrong_context: list[str] = []
    for instance_id, n in instance_ids.items():
        found = seen.get(instance_id)
        if found is None:
            continue
        if found.status != "COMPLETED":
            detail = "; ".join(x for x in (found.reason, found.error) if x)
            wrong_status.append(
                f"{instance_id} (n={n}) is {found.status}" + (f": {detail}" if detail else "")
            )
            continue
        expected = expected_context(n, steps)
        if found.context != expected:
            diffs = []
            for key in sorted(set(expected) | set(found.context), key=str):
                if found.context.get(key, "<missing>") != expected.get(key, "<absent>"):
                    diffs.append(
                        f"{key}={found.context.get(key, '<missing>')!r} (expected {expected.get(key, '<absent>')!r})"
                    )
            wrong_context.append(f"{instance_id} (n={n}): " + ", ".join(diffs[:6]))
        elif not found.finished_at or found.finished_at < found.created_at:
            wrong_status.append(f"{instance_id} (n={n}) COMPLETED with finished_at={found.finished_at}")
    if wrong_status:
        problems.append(f"{len(wrong_status)} instance(s) not COMPLETED: " + " | ".join(wrong_status[:5]))
    if wrong_context:
        problems.append(
            f"{len(wrong_context)} instance(s) with a wrong final context: " + " | ".join(wrong_context[:5])
        )
    return problems
