"""Malformed upstream definitions: every one is InvalidArgument naming the node and the field.

Never a KeyError or TypeError: a Hypothesis test breaks the golden files at random and checks
that the translation either succeeds or says what is wrong.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wiggle._limits import MAX_COUNT
from wiggle._upstream.definitions import derived_version, from_upstream
from wiggle.errors import InvalidArgument

GOLDEN = Path(__file__).parent / "golden"
DOCS = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(GOLDEN.glob("*.json"))}

Doc = dict[str, Any]


def node(doc: Doc, uid: str) -> dict[str, Any]:
    return next(n for n in doc["nodes"] if n["id"] == uid)


def setting(uid: str, key: str, value: object) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        node(doc, uid)[key] = value

    return change


def dropping(uid: str, key: str) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        del node(doc, uid)[key]

    return change


def top(key: str, value: object) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        doc[key] = value

    return change


def adding(extra: dict[str, Any]) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        doc["nodes"].append(extra)

    return change


def changes(*each: Callable[[Doc], None]) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        for one in each:
            one(doc)

    return change


# (golden, change, the message expected; re.escape'd unless it starts with "re:")
CASES: list[tuple[str, Callable[[Doc], None], str]] = [
    ("quickstart", top("name", None), "the workflow definition: 'name' is missing (the workflow's name)"),
    ("quickstart", top("name", 3), "the workflow definition: 'name' must be a string, got 3"),
    ("quickstart", top("name", "bad name"), "workflow name 'bad name' has characters outside"),
    ("quickstart", top("startNode", None), "workflow 'order': 'startNode' is missing"),
    ("quickstart", top("startNode", "n99"), "workflow 'order': 'startNode' 'n99' is not one of its nodes"),
    ("quickstart", top("nodes", None), "workflow 'order': 'nodes' is missing"),
    ("quickstart", top("nodes", {"a": 1}), "workflow 'order': 'nodes' must be a list, got an object"),
    ("quickstart", top("nodes", []), "workflow 'order' has no nodes"),
    ("quickstart", top("nodes", [3]), "workflow 'order': nodes[0] must be a JSON object, got a number"),
    ("quickstart", top("version", 0), "workflow 'order': 'version' must be in 1..2147483647, got 0"),
    ("quickstart", top("version", 2**31), "'version' must be in 1..2147483647, got 2147483648"),
    ("quickstart", top("version", "7"), "workflow 'order': 'version' must be an integer, got '7'"),
    ("quickstart", top("version", 1.5), "'version' must be an integer, got 1.5"),
    (
        "quickstart",
        top("executionMode", "FAST"),
        "'executionMode' 'FAST' is not one of DEFAULT, LOCAL_ASYNC,",
    ),
    (
        "quickstart",
        top("queues", "order"),
        "workflow 'order': 'queues' must be a list of strings, got 'order'",
    ),
    ("quickstart", top("queues", ["order", 1]), "workflow 'order': queues[1] must be a string, got a number"),
    ("quickstart", top("checkpoints", ["n99"]), "checkpoint 'n99' is not one of its nodes"),
    ("quickstart", top("checkpoints", ["n5"]), "checkpoint 'n5' is not a TASK or PREDICATE node"),
    ("quickstart", dropping("n1", "id"), "workflow 'order': nodes[0]: 'id' is missing (the node's id)"),
    ("quickstart", setting("n1", "id", 1), "workflow 'order': nodes[0]: 'id' must be a string, got 1"),
    ("quickstart", dropping("n1", "kind"), "nodes[0]: 'kind' is missing (the node's kind)"),
    (
        "quickstart",
        setting("n1", "kind", "USER_TASK"),
        "node 'n1': kind 'USER_TASK' is not supported; the supported kinds are TASK, PREDICATE, SLEEP, FORK, "
        "JOIN, END, SIGNAL, SUB_WORKFLOW, DYN_FORK",
    ),
    ("quickstart", setting("n4", "id", "n1"), "workflow 'order': two nodes have the id 'n1'"),
    (
        "quickstart",
        changes(setting("n4", "name", "validate"), setting("n4", "activity", "order#validate")),
        "workflow 'order': two steps are named 'validate' ('n1', 'n4')",
    ),
    (
        "quickstart",
        setting("n4", "activity", "other#charge"),
        "node 'n4' (TASK 'charge'): 'activity' is 'other#charge', but it must be 'order#charge'",
    ),
    (
        "quickstart",
        dropping("n4", "activity"),
        "node 'n4' (TASK 'charge'): 'activity' is missing (it must be",
    ),
    ("quickstart", dropping("n4", "name"), "node 'n4' (TASK): 'name' is missing (the step's name)"),
    ("quickstart", setting("n4", "name", "a b"), "node 'n4' (TASK 'a b') name 'a b' has characters outside"),
    ("quickstart", setting("n4", "queue", 5), "node 'n4' (TASK 'charge'): 'queue' must be a string, got 5"),
    ("quickstart", setting("n4", "next", "n99"), "node 'n4' (TASK 'charge'): 'next' points to 'n99', which"),
    ("quickstart", dropping("n4", "next"), "node 'n4' (TASK 'charge'): 'next' is missing"),
    (
        "quickstart",
        setting("n4", "altNext", "n5"),
        "node 'n4' (TASK 'charge'): has 'altNext', which TASK nodes",
    ),
    (
        "quickstart",
        dropping("n2", "altNext"),
        "node 'n2' (PREDICATE 'in-stock'): 'altNext' is missing (the false",
    ),
    (
        "quickstart",
        setting("n2", "altNext", "x"),
        "node 'n2' (PREDICATE 'in-stock'): 'altNext' points to 'x'",
    ),
    (
        "quickstart",
        setting("n5", "altNext", "n6"),
        "node 'n5' (SLEEP 'cool-off'): has 'altNext', which SLEEP nodes",
    ),
    (
        "quickstart",
        setting("n5", "branches", ["n6"]),
        "(SLEEP 'cool-off'): has 'branches', which SLEEP nodes",
    ),
    (
        "quickstart",
        setting("n5", "sleepMillis", "1s"),
        "node 'n5' (SLEEP 'cool-off'): 'sleepMillis' must be an",
    ),
    ("quickstart", setting("n5", "sleepMillis", -5), "sleep 'n5': sleep_millis must be >= 0, got -5"),
    ("quickstart", setting("n5", "sleepMillis", True), "'sleepMillis' must be an integer, got True"),
    (
        "quickstart",
        setting("end7", "next", "n1"),
        "node 'end7' (END): has 'next', which END nodes do not use",
    ),
    (
        "quickstart",
        setting("end7", "success", "yes"),
        "node 'end7' (END): 'success' must be true or false, got",
    ),
    ("quickstart", setting("end7", "reason", 1), "node 'end7' (END): 'reason' must be a string, got 1"),
    (
        "quickstart",
        setting("n4", "retry", [1]),
        "node 'n4' (TASK 'charge') retry must be a JSON object, got a list",
    ),
    (
        "quickstart",
        setting("n4", "retry", {"maxAttempts": 0}),
        "retry: 'maxAttempts' must be >= 1 (it counts the",
    ),
    (
        "quickstart",
        setting("n4", "retry", {"maxAttempts": 2**31}),
        "retry max_attempts is 2147483648; the limit",
    ),
    (
        "quickstart",
        setting("n4", "retry", {"multiplier": "x"}),
        "retry: 'multiplier' must be a finite number, got",
    ),
    (
        "quickstart",
        setting("n4", "retry", {"jitter": math.nan}),
        "retry: 'jitter' must be a finite number, got nan",
    ),
    ("quickstart", setting("n4", "retry", {"jitter": 1.0}), "retry jitter must be in [0, 1), got 1.0"),
    (
        "quickstart",
        setting("n4", "retry", {"maxBackoffMillis": -1}),
        "'maxBackoffMillis' must be >= 0, got -1",
    ),
    ("quickstart", setting("n4", "retry", {"initialBackoffMillis": -1}), "retry backoffs must be >= 0"),
    (
        "quickstart",
        setting("n4", "compensable", True),
        "node 'n4' (TASK 'charge'): compensable steps are not",
    ),
    ("quickstart", setting("n2", "loopBudget", 5), "node 'n2' (PREDICATE 'in-stock'): a 'loopBudget' is not"),
    ("quickstart", setting("n4", "itemsKey", "[]"), "node 'n4' (TASK 'charge'): combine steps (a TASK with"),
    (
        "quickstart",
        adding({"id": "n9", "kind": "SLEEP", "name": "lost", "next": "end7"}),
        "node 'n9' is unreachable from the start node 'validate'",
    ),
    (
        "fork_gate",
        setting("join3", "expected", 3),
        "node 'join3' (JOIN 'join3'): 'expected' is 3, but node 'fork2'",
    ),
    ("fork_gate", setting("fork2", "branches", []), "node 'fork2' (FORK 'fork2'): 'branches' is missing"),
    (
        "fork_gate",
        setting("fork2", "branches", ["n4", "n99"]),
        "'branches' names 'n99', which does not exist",
    ),
    (
        "fork_gate",
        setting("fork2", "next", "n8"),
        "node 'fork2' (FORK 'fork2'): has 'next', which FORK nodes",
    ),
    ("fork_gate", setting("n4", "next", "end8"), "fork 'fork2': branch 'charge' never reaches join 'join3'"),
    (
        "fork_gate",
        changes(
            setting("n4", "next", "end8"), setting("n5", "altNext", "end8"), setting("n6", "next", "end8")
        ),
        "node 'fork2' (FORK 'fork2'): no JOIN is reachable from its branches",
    ),
    (
        "quickstart",
        changes(adding({"id": "j9", "kind": "JOIN", "next": "n6"}), setting("n5", "next", "j9")),
        "node 'j9' (JOIN) closes no FORK or DYN_FORK",
    ),
    (
        "fork_gate",
        setting("n4", "next", "fork2"),
        "node 'fork2' (FORK 'fork2'): its branches lead back to it",
    ),
    (
        "nested_fork",
        setting("n8", "next", "join4"),
        "node 'fork1' (FORK 'fork1'): its branches reach more than one JOIN ('join4', 'join2')",
    ),
    (
        "fork_each",
        setting("dynfork1", "next", "n4"),
        "(DYN_FORK 'charge-items'): 'next' must be the JOIN that",
    ),
    (
        "fork_each",
        dropping("dynfork1", "next"),
        "(DYN_FORK 'charge-items'): 'next' is missing (the JOIN that",
    ),
    ("fork_each", setting("dynfork1", "branches", ["n3", "n3"]), "'branches' must name exactly one node"),
    ("fork_each", dropping("dynfork1", "itemsKey"), "'itemsKey' is missing (the context key of the list)"),
    ("fork_each", dropping("dynfork1", "itemKey"), "'itemKey' is missing (the context key each branch's"),
    ("fork_each", setting("join2", "expected", 2), "'expected' is 2, but it closes node 'dynfork1'"),
    (
        "sub_workflow_parent",
        dropping("sub2", "activity"),
        "(SUB_WORKFLOW 'run-child'): 'activity' is missing",
    ),
    ("sub_workflow_parent", setting("sub2", "activity", "no good"), "sub-workflow 'sub2' workflow 'no good'"),
    ("sub_workflow_parent", setting("sub2", "altNext", "n4"), "has 'altNext', which SUB_WORKFLOW nodes"),
    ("signal_timeout", dropping("n1", "name"), "node 'n1' (SIGNAL): 'name' is missing (the signal's name)"),
    ("signal_timeout", setting("n2", "sleepMillis", 0.5), "'sleepMillis' must be an integer, got 0.5"),
]


@pytest.mark.parametrize(
    ("name", "change", "message"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)]
)
def test_malformed_definitions_are_refused(name: str, change: Callable[[Doc], None], message: str) -> None:
    doc = copy.deepcopy(DOCS[name])
    change(doc)
    pattern = message[3:] if message.startswith("re:") else re.escape(message)
    with pytest.raises(InvalidArgument, match=pattern):
        from_upstream(doc)


def test_a_list_is_not_a_definition() -> None:
    with pytest.raises(InvalidArgument, match="the workflow definition must be a JSON object, got a list"):
        from_upstream([])  # type: ignore[arg-type]


def test_a_branch_reaching_two_joins_is_refused() -> None:
    doc = copy.deepcopy(DOCS["fork_gate"])
    doc["nodes"].append({"id": "j9", "kind": "JOIN", "name": "j9", "next": "n7"})
    node(doc, "n4")["next"] = "j9"
    with pytest.raises(
        InvalidArgument, match=re.escape("its branches reach more than one JOIN ('j9', 'join3')")
    ):
        from_upstream(doc)


def test_a_join_claimed_by_two_forks_is_refused() -> None:
    doc = copy.deepcopy(DOCS["fork_gate"])
    # a second fork over the same branches, started from a gate in front of the first
    doc["nodes"].append({"id": "fork9", "kind": "FORK", "name": "fork9", "branches": ["n4", "n5"]})
    node(doc, "n1")["next"] = "gate9"
    doc["nodes"].append(
        {
            "id": "gate9",
            "kind": "PREDICATE",
            "name": "pick",
            "activity": "fork-gate#pick",
            "queue": "fork-gate",
            "next": "fork2",
            "altNext": "fork9",
        }
    )
    with pytest.raises(InvalidArgument, match="closes both node 'fork2' .* and node 'fork9'"):
        from_upstream(doc)


def test_nothing_is_changed_by_a_refusal() -> None:
    doc = copy.deepcopy(DOCS["quickstart"])
    node(doc, "n4")["activity"] = "x#y"
    before = copy.deepcopy(doc)
    with pytest.raises(InvalidArgument):
        from_upstream(doc)
    assert doc == before


# ---------------------------------------------------------------------------- fuzzing: never a crash

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
NODE_KEYS = [
    "id", "kind", "name", "activity", "queue", "retry", "sleepMillis", "next", "altNext", "branches",
    "expected", "success", "reason", "itemsKey", "itemKey", "loopBudget", "compensable",
]  # fmt: skip
TOP_KEYS = ["name", "version", "startNode", "nodes", "queues", "executionMode", "checkpoints"]


@st.composite
def broken(draw: st.DrawFn) -> Doc:
    doc = copy.deepcopy(DOCS[draw(st.sampled_from(sorted(DOCS)))])
    ids = [n["id"] for n in doc["nodes"]]
    for _ in range(draw(st.integers(1, 3))):
        value = draw(JSON | st.sampled_from(ids))  # a node id makes a wrong but well-formed edge
        nodes = doc.get("nodes")
        if draw(st.booleans()) or not isinstance(nodes, list) or not nodes:
            key = draw(st.sampled_from(TOP_KEYS))
            if draw(st.booleans()):
                doc.pop(key, None)
            else:
                doc[key] = value
        else:
            target = draw(st.sampled_from(nodes))
            if not isinstance(target, dict):
                continue
            key = draw(st.sampled_from([*NODE_KEYS, "retry.maxAttempts", "retry.multiplier"]))
            if key.startswith("retry.") and isinstance(target.get("retry"), dict):
                target["retry"][key[6:]] = value
            elif draw(st.booleans()):
                target.pop(key, None)
            else:
                target[key] = value
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken())
def test_broken_definitions_are_refused_cleanly_or_translate(doc: Doc) -> None:
    try:
        result = from_upstream(doc)
    except InvalidArgument as exc:
        assert str(exc)
    else:
        assert result.definition.validate() is result.definition


# ---------------------------------------------------------------------------- derived versions


def test_derived_version_is_in_range_and_never_zero() -> None:
    assert derived_version("0000000000000000") == 1
    assert derived_version(format(MAX_COUNT * 12345, "016x")) == 1
    assert derived_version("ffffffffffffffff") == 0xFFFFFFFFFFFFFFFF % MAX_COUNT + 1
    assert derived_version("00000000000000ff") == 256


@given(st.text("0123456789abcdef", min_size=16, max_size=16))
def test_derived_version_property(content_hash: str) -> None:
    v = derived_version(content_hash)
    assert 1 <= v <= MAX_COUNT and v == derived_version(content_hash)


@pytest.mark.parametrize("bad", ["", "abc", "0123456789ABCDEF", "0123456789abcdeg", "0123456789abcdef0", 5])
def test_derived_version_refuses_what_is_not_a_content_hash(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="a content hash is 16 lowercase hex digits"):
        derived_version(bad)  # type: ignore[arg-type]
