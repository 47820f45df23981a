"""The public surface is declared and pinned: a change here is a change users see."""

import wiggle

EXPECTED = {
    "__version__",
    "AsyncClient",
    "Blueprint",
    "Branch",
    "Client",
    "Credentials",
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
    "PermanentError",
    "RetryableError",
    "RetryPolicy",
    "ScheduleInfo",
    "Step",
    "TokenInfo",
    "TokenStatus",
    "Unavailable",
    "WiggleError",
    "Worker",
    "WorkerOptions",
    "Workflow",
    "WorkflowDefinition",
    "WorkflowFailed",
    "WorkflowInfo",
}


def test_all_is_pinned() -> None:
    assert set(wiggle.__all__) == EXPECTED


def test_every_export_exists_and_is_documented() -> None:
    for name in wiggle.__all__:
        obj = getattr(wiggle, name)
        if name != "__version__":
            assert obj.__doc__, f"{name} has no docstring"


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
