"""``foreign`` (wiggle/_json_values.py): the values JSON would hold only as another type, by path."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid
from typing import NamedTuple

import msgspec
import pytest

from wiggle._json_values import foreign


class Color(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    S = 1


class Point(NamedTuple):
    x: int
    y: datetime.date


@dataclasses.dataclass
class Box:
    side: int


class Customer:
    pass


class Tag(msgspec.Struct):
    name: str


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1, "b": [1.5, "x", None, True, {"c": []}], "d": (1, 2)},
        {"size": Size.S, "tag": Tag("x")},
        {},
        {"customer": Customer()},  # msgspec cannot encode it at all: the encoder's error names it
    ],
)
def test_json_values_and_what_the_encoder_refuses_pass(value: object) -> None:
    assert foreign(value) is None


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"when": datetime.datetime(2024, 1, 1)}, "['when']", "of type datetime"),
        ({"a": [1, {"b": datetime.date(2024, 1, 1)}]}, "['a'][1]['b']", "of type date"),
        ({"price": decimal.Decimal("1.1")}, "['price']", "store str(value) or a float"),
        ({"id": uuid.UUID(int=1)}, "['id']", "of type UUID"),
        ({"tags": {"a"}}, "['tags']", "of type set"),
        ({"raw": b"x"}, "['raw']", "of type bytes"),
        ({"color": Color.RED}, "['color']", "store its .value"),
        ({"box": Box(1)}, "['box']", "dataclasses.asdict"),
        ({"m": {1: "a"}}, "['m']", "the int key 1"),
        ({"p": Point(1, datetime.date(2024, 1, 1))}, "['p'][1]", "of type date"),
    ],
)
def test_values_read_back_as_another_type_are_found_by_path(value: object, path: str, words: str) -> None:
    found = foreign(value)
    assert found is not None and found[0] == path and words in found[1], found
