"""The public surface is declared and pinned: a change here is a change users see."""

import inspect
import typing
from collections.abc import Iterator

import wiggle

EXPECTED = {
    "__version__",
    "AlreadyFinished",
    "AsyncClient",
    "Blueprint",
    "Branch",
    "Client",
    "ClientClosed",
    "Credentials",
    "ErrorCode",
    "ExecutionMode",
    "FailedPrecondition",
    "Handback",
    "HistoryEntry",
    "InstanceInfo",
    "InstanceStatus",
    "InvalidArgument",
    "Limit",
    "RateLimit",
    "NodeKind",
    "NotFound",
    "PendingSignalInfo",
    "PermanentError",
    "PermissionDenied",
    "PassedOver",
    "QueueInfo",
    "QueueWorker",
    "ResourceExhausted",
    "RetryableError",
    "RetryPolicy",
    "ScheduleInfo",
    "SignalResult",
    "Step",
    "TokenInfo",
    "TokenStatus",
    "Unauthenticated",
    "Unavailable",
    "WiggleError",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowFailed",
    "WorkflowInfo",
    "WrongEventLoop",
}


def test_all_is_pinned() -> None:
    assert set(wiggle.__all__) == EXPECTED


def test_every_export_exists_and_is_documented() -> None:
    for name in wiggle.__all__:
        obj = getattr(wiggle, name)
        if name != "__version__":
            assert obj.__doc__, f"{name} has no docstring"


def test_every_public_error_is_exported() -> None:
    """An error a call may raise is one a caller may want to catch by name: ``from wiggle import
    *`` gives every class of wiggle.errors (ResourceExhausted, PermissionDenied, Unauthenticated,
    AlreadyFinished and ErrorCode were left out), RetryableError too."""
    import wiggle.errors

    assert set(wiggle.errors.__all__) <= set(wiggle.__all__)
    for name in wiggle.errors.__all__:
        assert getattr(wiggle, name) is getattr(wiggle.errors, name)
    namespace: dict[str, object] = {}
    exec("from wiggle import *", namespace)
    assert {"ResourceExhausted", "PermissionDenied", "Unauthenticated", "AlreadyFinished"} <= set(namespace)


def _wiggle_types(hint: object) -> Iterator[type]:
    """The wiggle classes a type hint names, its arguments' too (``tuple[list[InstanceInfo], str]``)."""
    if isinstance(hint, type) and hint.__module__.split(".")[0] == "wiggle":
        yield hint
    for argument in typing.get_args(hint):
        yield from _wiggle_types(argument)


def test_every_type_a_public_call_returns_is_exported() -> None:
    """What a client call returns (SignalResult from ``signal``, QueueInfo from ``queues``...),
    and every type inside a reply (an InstanceInfo's tokens, a QueueInfo's workers), can be
    imported from ``wiggle`` to annotate the code that holds it. (A WorkflowInfo's definition is
    the exported WorkflowDefinition; its nodes are the DSL's business, not a reply's.)"""
    from wiggle import AsyncClient, Client, Workflow

    seen: set[type] = set()
    pending: list[type] = []
    for owner in (Client, AsyncClient, Workflow):
        for name, method in inspect.getmembers(owner, inspect.isfunction):
            if not name.startswith("_"):
                pending.extend(_wiggle_types(typing.get_type_hints(method).get("return")))
    while pending:
        kind = pending.pop()
        if kind in seen:
            continue
        seen.add(kind)
        if kind.__module__ == "wiggle._client.types":  # a reply: what it holds too
            pending.extend(t for hint in typing.get_type_hints(kind).values() for t in _wiggle_types(hint))
    assert {"SignalResult", "QueueInfo", "QueueWorker", "InstanceInfo"} <= {k.__name__ for k in seen}
    missing = sorted(k.__name__ for k in seen if getattr(wiggle, k.__name__, None) is not k)
    assert not missing, f"returned by a public call but not exported by wiggle: {missing}"


def test_the_package_docstring_introduces_wiggle_to_a_user() -> None:
    """``help(wiggle)`` opens with what Wiggle is and its main names, not with how the package
    loads them (that is a comment in wiggle/__init__.py)."""
    doc = wiggle.__doc__ or ""
    assert doc.startswith("Wiggle for Python: a durable workflow engine.")
    for name in ("Workflow", "Client", "AsyncClient", "Worker", "wiggle.testing", "docs/"):
        assert name in doc, name
    assert "PEP 562" not in doc and "tests/" not in doc


TESTING = {
    "AsyncView",
    "EmbeddedServer",
    "SyncWorkflowEnvironment",
    "VirtualClock",
    "WorkflowEnvironment",
    "mock_step",
    "path_of",
}


def test_testing_all_is_pinned_and_documented() -> None:
    import wiggle.pytest_plugin
    import wiggle.testing

    assert set(wiggle.testing.__all__) == TESTING
    assert set(wiggle.pytest_plugin.__all__) == {"wiggle_env", "wiggle_module_env"}
    for name in wiggle.testing.__all__:
        assert getattr(wiggle.testing, name).__doc__, f"wiggle.testing.{name} has no docstring"


def test_the_lazy_names_match_the_typed_imports() -> None:
    """wiggle/__init__.py says each public name twice, once for type checkers and once for the
    lazy loader: the two lists must agree, module for module."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(wiggle.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                for alias in imp.names:
                    typed[alias.name] = "." * imp.level + (imp.module or "")
    assert typed == wiggle._WHERE
    assert set(wiggle.__all__) == {"__version__", *wiggle._WHERE}


def test_importing_the_client_loads_no_engine_store_server_or_worker() -> None:
    """A process that only starts workflows (a web app, a script) pays for the client and the
    DSL, not for the engine, the stores, the server or the worker."""
    import subprocess
    import sys

    code = (
        "import sys, wiggle.client, wiggle.errors; from wiggle import Client, Workflow, InstanceStatus; "
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('wiggle'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    heavy = {
        m
        for m in loaded
        if m.split(".")[1:2]
        and m.split(".")[1] in {"_engine", "_storage", "_server", "_worker", "_fast", "_upstream"}
    }
    assert "wiggle._client.sync" in loaded
    assert not heavy, f"importing the client loaded {sorted(heavy)}"
