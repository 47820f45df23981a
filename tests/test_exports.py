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
    "InvalidArgument",
    "NodeKind",
    "NotFound",
    "PermanentError",
    "RetryPolicy",
    "ScheduleInfo",
    "Step",
    "TokenInfo",
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
