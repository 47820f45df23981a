"""The PostgreSQL row codecs' shortcuts (wiggle/_storage/postgres/codecs.py) give what the general
path gives: text array literals without per-element escaping when nothing needs escaping, and
the empty JSON columns of an instance (no join, no signal) neither decoded nor encoded."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from wiggle._engine.state import Instance, JoinState, PendingSignal
from wiggle._storage.postgres.codecs import (
    I_JOINS,
    I_SIGNAL_IDS,
    I_SIGNALS,
    encode_instance_json,
    instance_from,
    instance_row,
    text_array,
)


def _escaped(column: tuple[str, ...]) -> str:
    """The literal every element escaped one by one (the general path)."""
    if not column:
        return "{}"
    return '{"' + '","'.join(v.replace("\\", "\\\\").replace('"', '\\"') for v in column) + '"}'


@given(st.lists(st.text(alphabet=st.sampled_from('ab",\\{} '), max_size=6), max_size=6))
def test_text_array_matches_escaping_every_element(values: list[str]) -> None:
    column = tuple(values)
    assert text_array(column) == _escaped(column)


def test_text_array_escapes_quotes_and_backslashes() -> None:
    assert text_array(("a", "b")) == '{"a","b"}'
    assert text_array(('","',)) == '{"\\",\\""}'
    assert text_array(("x\\y", "")) == '{"x\\\\y",""}'


def _instance(**fields: object) -> Instance:
    base = {
        "id": "wi-1",
        "workflow": "w",
        "version": "v1",
        "status": "RUNNING",
        "context": {"a": 1},
        "created_at": 1,
        "updated_at": 2,
    }
    base.update(fields)
    return msgspec.convert(base, Instance)


def test_empty_json_columns_round_trip() -> None:
    inst = _instance()
    row = instance_row(inst)
    assert (row[I_JOINS], row[I_SIGNALS], row[I_SIGNAL_IDS]) == (b"{}", b"[]", b"[]")
    assert row[I_JOINS] == msgspec.json.encode(inst.joins)
    back = instance_from(row)
    assert back == inst
    assert back.signals == [] and back.signal_ids == [] and back.joins == {}
    back.signals.append(PendingSignal(name="s", data={}))
    assert instance_from(row).signals == []  # every load gets its own empty list


def test_non_empty_json_columns_round_trip() -> None:
    inst = _instance(
        joins={"j": JoinState(fork_node="f", branch_count=2, base={"b": 1}, arrived={"0": {"x": 1}})},
        signals=[PendingSignal(name="s", data={"p": 1}, signal_id="id-1", sent_at=3)],
        signal_ids=["id-1"],
    )
    values = list(msgspec.structs.astuple(inst))
    encode_instance_json(values, inst)
    assert values[I_SIGNAL_IDS] == b'["id-1"]'
    row = instance_row(inst)
    assert instance_from(row) == inst
