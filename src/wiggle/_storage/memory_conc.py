"""The memory store's index of workflow-level concurrency keys (docs/flow-control.md#workflow-concurrency).

Per (workflow, key label) the ids of its instances that are RUNNING or waiting for a slot, kept
at every commit (``track``), so an admission finds them without a scan. An admission runs
without an await between its reads and its writes: on one event loop nothing else runs in
between, which is the memory store's lock of the key.
"""

from __future__ import annotations

from collections.abc import Callable

from .._engine.engine import LoadedDefinition
from .._engine.state import Changes, Instance, InstanceState, InstanceStatus
from .base import ADMIT_BATCH, AdmitAction

__all__ = ["ConcIndex"]


def _counts(inst: Instance) -> bool:
    """RUNNING (live), or SCHEDULED waiting for a slot."""
    return inst.status == InstanceStatus.RUNNING or (
        inst.status == InstanceStatus.SCHEDULED and inst.conc_since > 0
    )


class ConcIndex:
    """(workflow, key) -> the ids of its live and waiting instances."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str], set[str]] = {}

    def track(self, inst: Instance) -> None:
        """Index ``inst`` (of a limited workflow) as it is after a commit."""
        key = (inst.workflow, inst.conc_key)
        if _counts(inst):
            self._keys.setdefault(key, set()).add(inst.id)
            return
        ids = self._keys.get(key)
        if ids is not None:
            ids.discard(inst.id)
            if not ids:
                del self._keys[key]

    def waiting_keys(self, instances: dict[str, InstanceState], limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` keys with an instance waiting for a slot that, by its version's max,
        has one free (Store.waiting_keys)."""
        out: list[tuple[str, str]] = []
        for key, ids in sorted(self._keys.items()):
            states = [instances[i].instance for i in ids]
            live = sum(1 for inst in states if inst.status == InstanceStatus.RUNNING)
            if any(inst.status == InstanceStatus.SCHEDULED and live < inst.conc_max for inst in states):
                out.append(key)
                if len(out) >= limit:
                    break
        return out

    def waiting_per_workflow(self, instances: dict[str, InstanceState]) -> dict[str, int]:
        """Instances waiting for a slot, per workflow (Store.concurrency_waiting)."""
        out: dict[str, int] = {}
        for (workflow, _), ids in self._keys.items():
            n = sum(1 for i in ids if instances[i].instance.status == InstanceStatus.SCHEDULED)
            if n:
                out[workflow] = out.get(workflow, 0) + n
        return out

    def admit(
        self,
        workflow: str,
        key: str,
        instances: dict[str, InstanceState],
        loaded: Callable[[InstanceState], LoadedDefinition],
        action: AdmitAction,
        now: int,
    ) -> list[tuple[InstanceState, Changes]]:
        """Run one admission of ``key`` (Store.admit); the caller applies what it changed."""
        states = [instances[i] for i in self._keys.get((workflow, key), ())]
        live = sorted(
            (s for s in states if s.instance.status == InstanceStatus.RUNNING),
            key=lambda s: (s.instance.created_at, s.instance.id),
        )
        waiting = sorted(
            (s for s in states if s.instance.status == InstanceStatus.SCHEDULED),
            key=lambda s: (s.instance.conc_since, s.instance.id),
        )[:ADMIT_BATCH]
        return action([(loaded(s), s) for s in live], [(loaded(s), s) for s in waiting], now)
