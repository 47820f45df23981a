"""An upstream definition's raw graph, and which JOIN closes each FORK and DYN_FORK.

Upstream names no join on a FORK: a FORK's join is the JOIN its branches lead to, walking over
nested forks (each closed by its own join) and stopping at JOINs. A DYN_FORK names its join as
its ``next``. Ours names the pair both ways (``Node.join`` / ``Node.fork``), so the translation
(wiggle/_upstream/definitions.py) asks ``pair_joins`` for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument
from .fields import Fields

__all__ = ["RawNode", "pair_joins"]


@dataclass(frozen=True)
class RawNode:
    """One upstream node as read: its id, kind, edges (upstream ids) and the rest of its fields."""

    uid: str
    kind: str
    label: str  # how errors name it: "node 'n2' (PREDICATE 'in-stock')"
    fields: Fields
    next: str | None
    alt_next: str | None
    branches: tuple[str, ...]


def pair_joins(nodes: dict[str, RawNode]) -> tuple[dict[str, str], dict[str, str]]:
    """``(join_of, fork_of)``: the JOIN closing each FORK / DYN_FORK, and the reverse.

    Every edge must already point at an existing node. InvalidArgument when a fork's branches
    reach no JOIN or more than one, when a JOIN closes two forks or none, when a DYN_FORK's
    ``next`` is not a JOIN, or when a JOIN's ``expected`` disagrees with its fork.
    """
    finder = _JoinFinder(nodes)
    try:
        for node in nodes.values():
            if node.kind in _FORKS:
                finder.find(node)
    except RecursionError:
        raise InvalidArgument("the definition's forks are nested too deeply") from None
    join_of = finder.join_of
    fork_of: dict[str, str] = {}
    for fork_uid, join_uid in join_of.items():
        other = fork_of.get(join_uid)
        if other is not None:
            raise InvalidArgument(
                f"{nodes[join_uid].label} closes both {nodes[other].label} and {nodes[fork_uid].label}"
            )
        fork_of[join_uid] = fork_uid
    for node in nodes.values():
        if node.kind == "JOIN":
            closes = fork_of.get(node.uid)
            if closes is None:
                raise InvalidArgument(f"{node.label} closes no FORK or DYN_FORK")
            _check_expected(node, nodes[closes])
    return join_of, fork_of


_FORKS = ("FORK", "DYN_FORK")


class _JoinFinder:
    """Finds the JOIN of each fork, remembering the ones found (nested forks are asked once)."""

    def __init__(self, nodes: dict[str, RawNode]) -> None:
        self.nodes = nodes
        self.join_of: dict[str, str] = {}
        self.in_progress: set[str] = set()  # forks whose branches are being walked

    def find(self, fork: RawNode) -> str:
        """The JOIN closing ``fork``: a DYN_FORK's ``next``, the one JOIN a FORK's branches reach."""
        known = self.join_of.get(fork.uid)
        if known is not None:
            return known
        if fork.kind == "DYN_FORK":
            return self._dyn_fork_join(fork)
        if fork.uid in self.in_progress:
            raise InvalidArgument(f"{fork.label}: its branches lead back to it before reaching a JOIN")
        self.in_progress.add(fork.uid)
        found: list[str] = []
        for start in fork.branches:
            self._walk(start, found)
        self.in_progress.discard(fork.uid)
        if not found:
            raise InvalidArgument(f"{fork.label}: no JOIN is reachable from its branches")
        if len(found) > 1:
            raise InvalidArgument(
                f"{fork.label}: its branches reach more than one JOIN ({', '.join(map(repr, found))}); "
                "a fork closes at exactly one"
            )
        self.join_of[fork.uid] = found[0]
        return found[0]

    def _dyn_fork_join(self, fork: RawNode) -> str:
        assert fork.next is not None  # checked when the node was read
        target = self.nodes[fork.next]
        if target.kind != "JOIN":
            raise InvalidArgument(
                f"{fork.label}: 'next' must be the JOIN that closes it, but {fork.next!r} is a {target.kind}"
            )
        self.join_of[fork.uid] = fork.next
        return fork.next

    def _walk(self, start: str, found: list[str]) -> None:
        """Add to ``found`` the JOINs reachable from ``start`` without passing through a JOIN."""
        stack = [start]
        seen: set[str] = set()
        while stack:
            uid = stack.pop()
            if uid in seen:
                continue
            seen.add(uid)
            node = self.nodes[uid]
            if node.kind == "JOIN":
                if uid not in found:
                    found.append(uid)
            elif node.kind in _FORKS:
                inner = self.nodes[self.find(node)]  # skip the nested fork: go on after its own join
                if inner.next is not None:
                    stack.append(inner.next)
            elif node.kind != "END":
                stack.extend(t for t in (node.alt_next, node.next) if t is not None)


def _check_expected(join: RawNode, fork: RawNode) -> None:
    """A JOIN's ``expected`` (0 or absent: not stated) must match its fork's width."""
    expected = join.fields.integer("expected", 0)
    if fork.kind == "DYN_FORK":
        if expected != 0:
            raise InvalidArgument(
                f"{join.label}: 'expected' is {expected}, but it closes {fork.label}, whose width is known "
                "only at run time (leave 'expected' out)"
            )
    elif expected != 0 and expected != len(fork.branches):
        raise InvalidArgument(
            f"{join.label}: 'expected' is {expected}, but {fork.label} has {len(fork.branches)} branches"
        )
