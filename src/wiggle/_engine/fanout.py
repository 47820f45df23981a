"""FOR_EACH: one branch per element of a list, a bounded number at a time (docs/semantics.md#for-each).

The fork side starts up to ``concurrency`` branches; each branch that reaches the join records its
result and, while elements remain, goes round again on the next element (the same token, in the
same transition), so a list of any length is worked through a slice at a time and no transition
creates more than ``concurrency`` tokens. The last branch to arrive continues past the join with
the results, in input order, under the node's ``result_key``; in a LAST_WRITE_WINS definition,
with the branches' writes merged in arrival order instead (wiggle/_engine/lww.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._limits import MAX_FOR_EACH_ITEMS
from .._model import DEFAULT_FOR_EACH_CONCURRENCY, JoinMerge, Node
from ..errors import InvalidArgument
from . import lww
from .config import LoadedDefinition
from .state import Changes, HistoryOutcome, InstanceState, JoinState, Token, TokenStatus
from .tokens import context_of, fail_instance, finish_token, move, new_token, record, set_context

_encode = msgspec.json.Encoder().encode

__all__ = ["NotAList", "ListTooLong", "start_for_each", "arrive_for_each", "branch_context"]


class NotAList(InvalidArgument):
    """The context value a FOR_EACH fans out over is not a list it can fan out over.

    The drive loop (wiggle/_engine/drive.py) refuses the start with it when the node is reached at
    start (nothing is stored), and fails the instance with its message later.
    """


class ListTooLong(NotAList):
    """The list a FOR_EACH fans out over has more than MAX_FOR_EACH_ITEMS elements (handled as
    NotAList is: the start refused, or the instance failed, naming the node, length and limit)."""


def _keys(node: Node) -> tuple[str, str, str, str]:
    """(item_key, index_key, output_key, result_key) with their defaults."""
    return (
        node.item_key or "item",
        node.index_key or "index",
        node.output_key or "result",
        node.result_key or "results",
    )


def branch_context(node: Node, base: dict[str, Any], index: int) -> dict[str, Any]:
    """Branch ``index``'s context: the fork-time context without the list, plus element and index."""
    assert node.items_key is not None
    item_key, index_key, _, _ = _keys(node)
    items = base[node.items_key]
    context = {k: v for k, v in base.items() if k != node.items_key}
    context[item_key] = items[index]
    context[index_key] = index
    return context


def start_for_each(
    loaded: LoadedDefinition, state: InstanceState, tok: Token, node: Node, now: int, changes: Changes
) -> list[Token]:
    """Fan ``tok`` out at the FOR_EACH ``node``: the branch tokens started (none: ``tok`` moved on).

    NotAList (an InvalidArgument) if the value at ``items_key`` is not a list, ListTooLong (a
    NotAList) if it has more than MAX_FOR_EACH_ITEMS elements; nothing is changed then.
    """
    assert node.items_key is not None and node.join is not None
    base = context_of(state, tok)
    items = base.get(node.items_key)
    if node.items_key not in base and loaded.definition.join_merge is JoinMerge.LAST_WRITE_WINS:
        items = []  # upstream's rule (its definitions are LAST_WRITE_WINS): a missing list is empty
    if not isinstance(items, list):
        found = "missing" if node.items_key not in base else f"a {type(items).__name__}"
        raise NotAList(
            f"for_each {node.id!r}: context key {node.items_key!r} must be a list, but it is {found}"
        )
    if len(items) > MAX_FOR_EACH_ITEMS:
        raise ListTooLong(
            f"for_each {node.id!r}: the list at context key {node.items_key!r} has {len(items)} "
            f"elements; the limit is {MAX_FOR_EACH_ITEMS}"
        )
    record(state, tok, node, HistoryOutcome.FORKED, now, changes)
    join_node = loaded.nodes[node.join]
    if not items:  # an empty list goes straight to the join
        if loaded.definition.join_merge is JoinMerge.STRICT:
            _, _, _, result_key = _keys(node)
            set_context(state, tok, {**base, result_key: []}, changes)
        record(state, tok, join_node, HistoryOutcome.JOINED, now, changes)
        assert join_node.next is not None
        move(tok, join_node.next)
        return []
    group = f"{tok.id}@{node.id}@{state.instance.token_seq}"
    limit = node.concurrency or DEFAULT_FOR_EACH_CONCURRENCY
    first = min(len(items), limit)
    state.instance.joins = dict(state.instance.joins)
    main_line = not tok.fork_stack
    state.instance.joins[group] = JoinState(
        fork_node=node.id,
        branch_count=len(items),
        base={} if main_line else base,
        for_each=True,
        started=first,
        results={},
        base_is_context=main_line,
    )
    changes.instance_changed = True
    spawned: list[Token] = []
    for index in range(first):
        child = new_token(state, node.branches[0], now, changes)
        child.context = branch_context(node, base, index)
        child.fork_stack = [*tok.fork_stack, (group, index)]
        spawned.append(child)
    finish_token(state, tok, TokenStatus.DONE, now, changes)
    return spawned


def arrive_for_each(
    loaded: LoadedDefinition,
    state: InstanceState,
    tok: Token,
    join_node: Node,
    group: str,
    join: JoinState,
    index: int,
    now: int,
    changes: Changes,
    limit: int,
) -> bool:
    """A FOR_EACH branch reached its join: True if ``tok`` moves on (past the join, or round again).

    The results together (LAST_WRITE_WINS: the merged writes, and the context they make) must stay
    within ``limit`` bytes (the payload limit: they become part of the context); past it the
    instance fails at once, naming the node and the limit.
    """
    node = loaded.nodes[join.fork_node]
    result_key = _keys(node)[3]
    base = state.instance.context if join.base_is_context else join.base
    lww_merge = loaded.definition.join_merge is JoinMerge.LAST_WRITE_WINS
    if lww_merge:
        if not _merge_arrival(state, tok, node, base, join, index, now, changes, limit):
            return False
    elif not _record_result(state, tok, node, join, index, now, changes, limit):
        return False
    changes.instance_changed = True
    if join.started < join.branch_count:  # elements remain: this token takes the next one
        nxt = join.started
        join.started += 1
        tok.fork_stack = [*tok.fork_stack[:-1], (group, nxt)]
        tok.context = branch_context(node, base, nxt)
        move(tok, node.branches[0])
        return True
    if (join.merged_count if lww_merge else len(join.results)) < join.branch_count:
        finish_token(state, tok, TokenStatus.DONE, now, changes)  # others still run: this one is done
        return False
    if lww_merge:
        after = lww.apply_merged(base, join)
        size = len(_encode(after))
        if size > limit:
            _fail_at_limit(
                tok,
                node,
                state,
                f"for_each {node.id!r}: the context after merging the branches' writes is {size} bytes; "
                f"the limit is {limit} bytes",
                now,
                changes,
            )
            return False
    else:
        after = {**base, result_key: [join.results[str(i)] for i in range(join.branch_count)]}
    del state.instance.joins[group]
    record(state, tok, join_node, HistoryOutcome.JOINED, now, changes)
    tok.fork_stack = list(tok.fork_stack[:-1])
    tok.context = None
    set_context(state, tok, after, changes)
    assert join_node.next is not None
    move(tok, join_node.next)
    return True


def _fail_at_limit(
    tok: Token, node: Node, state: InstanceState, message: str, now: int, changes: Changes
) -> None:
    """Fail the instance at a FOR_EACH's size limit, with a FAILED entry of ``node`` saying why in
    its history (the instance's error alone said it: its history ended on COMPLETED steps)."""
    record(state, tok, node, HistoryOutcome.FAILED, now, changes, error=message)
    fail_instance(state, message, now, changes)


def _record_result(
    state: InstanceState,
    tok: Token,
    node: Node,
    join: JoinState,
    index: int,
    now: int,
    changes: Changes,
    limit: int,
) -> bool:
    """STRICT: keep branch ``index``'s result; False (the instance failed) past ``limit`` bytes."""
    _, _, output_key, _ = _keys(node)
    result = context_of(state, tok).get(output_key)
    join.results_bytes += len(_encode(result)) + len(str(index)) + 4
    if join.results_bytes > limit:
        _fail_at_limit(
            tok,
            node,
            state,
            f"for_each {node.id!r}: the results reached {join.results_bytes} bytes after {len(join.results) + 1} "
            f"of {join.branch_count} elements; the limit is {limit} bytes (return less at {output_key!r})",
            now,
            changes,
        )
        return False
    join.results[str(index)] = result
    return True


def _merge_arrival(
    state: InstanceState,
    tok: Token,
    node: Node,
    base: dict[str, Any],
    join: JoinState,
    index: int,
    now: int,
    changes: Changes,
    limit: int,
) -> bool:
    """LAST_WRITE_WINS: merge branch ``index``'s writes (its diff against the context it started
    with; the element and index keys are its own) over the earlier arrivals' (wiggle/_engine/lww.py).

    False (the instance failed) if the merged writes pass ``limit`` bytes. ``results_bytes`` is
    an upper bound of their size (the sum of the writes merged); the exact size is measured only
    when the bound passes the limit, then the bound restarts from it.
    """
    item_key, index_key, _, _ = _keys(node)
    start = branch_context(node, base, index)
    changed, removed = lww.branch_writes(start, context_of(state, tok), (item_key, index_key))
    lww.merge_writes(join, changed, removed)
    join.results_bytes += len(_encode(changed)) + len(_encode(removed))
    if join.results_bytes > limit:
        join.results_bytes = len(_encode(join.merged)) + len(_encode(join.merged_removed))
        if join.results_bytes > limit:
            _fail_at_limit(
                tok,
                node,
                state,
                f"for_each {node.id!r}: the branches' writes reached {join.results_bytes} bytes after "
                f"{join.merged_count} of {join.branch_count} elements; the limit is {limit} bytes",
                now,
                changes,
            )
            return False
    return True
