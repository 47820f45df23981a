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
