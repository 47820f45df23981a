"""The error codes are transport-free; wiggle/_wire/status.py is the one map to gRPC."""

from __future__ import annotations

import ast
import inspect

import grpc
import pytest

import wiggle.errors
from wiggle._wire import status
from wiggle.errors import (
    ErrorCode,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    WiggleError,
)


def test_errors_module_does_not_import_grpc() -> None:
    tree = ast.parse(inspect.getsource(wiggle.errors))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "grpc" not in imported


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_round_trips(code: ErrorCode) -> None:
    assert status.from_grpc(status.to_grpc(code)) is code
    assert status.from_wire_number(status.to_wire_number(code)) is code
    assert status.to_grpc(code).name == code.name


def test_ok_and_unknown_numbers_read_as_unknown() -> None:
    assert status.from_grpc(grpc.StatusCode.OK) is ErrorCode.UNKNOWN
    assert status.from_wire_number(999) is ErrorCode.UNKNOWN


@pytest.mark.parametrize(
    "cls",
    [
        InvalidArgument,
        NotFound,
        FailedPrecondition,
        Unavailable,
        ResourceExhausted,
        PermissionDenied,
        Unauthenticated,
    ],
)
def test_error_for_picks_the_class_of_the_code(cls: type[WiggleError]) -> None:
    err = status.error_for(cls.code, "the server said so")
    assert type(err) is cls and err.code is cls.code and str(err) == "the server said so"


def test_an_unmapped_code_is_a_plain_wiggle_error_keeping_its_code() -> None:
    err = status.error_for(ErrorCode.DEADLINE_EXCEEDED, "")
    assert type(err) is WiggleError and err.code is ErrorCode.DEADLINE_EXCEEDED
    assert str(err) == "DEADLINE_EXCEEDED"


class FakeRpcError(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.NOT_FOUND

    def details(self) -> str:
        return "instance wi-1 does not exist"


def test_error_from_rpc() -> None:
    err = status.error_from_rpc(FakeRpcError())
    assert isinstance(err, NotFound) and str(err) == "instance wi-1 does not exist"
    bare = status.error_from_rpc(grpc.RpcError("no code"))
    assert bare.code is ErrorCode.UNKNOWN


def test_invalid_argument_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        raise InvalidArgument("bad")
