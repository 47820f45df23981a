"""The handback of a step cut by the worker's drain (wiggle/_worker/server_step.py
``hand_back_cut``): reason CUT, and SHUTDOWN again to a server older than that reason."""

from __future__ import annotations

from typing import Any

from wiggle._rpc import wiggle_pb2 as pb
from wiggle._worker.server_step import hand_back_cut
from wiggle.errors import InvalidArgument, Unavailable


class Reporter:
    def __init__(self, refuse: set[str], error: Exception | None = None) -> None:
        self.sent: list[str] = []
        self.refuse = refuse
        self.error = error

    async def advance(self, request: pb.AdvanceRunRequest) -> Any:
        self.sent.append(request.handback_reason)
        if self.error is not None:
            raise self.error
        if request.handback_reason in self.refuse:  # what an older server answers (worker_service.py)
            raise InvalidArgument(
                f"AdvanceRun handback_reason {request.handback_reason!r} is not a handback reason; "
                "send one of SLEEP, ..., SHUTDOWN, or none; nothing was applied"
            )
        return pb.AdvanceRunResult()


def request() -> pb.AdvanceRunRequest:
    return pb.AdvanceRunRequest(task_id="t", lease_owner="w", final=True)


async def test_a_cut_is_handed_back_as_cut() -> None:
    reporter = Reporter(refuse=set())
    assert await hand_back_cut(reporter, request())  # type: ignore[arg-type]
    assert reporter.sent == ["CUT"]


async def test_a_server_without_the_reason_gets_shutdown() -> None:
    reporter = Reporter(refuse={"CUT"})
    assert await hand_back_cut(reporter, request())  # type: ignore[arg-type]
    assert reporter.sent == ["CUT", "SHUTDOWN"]


async def test_a_handback_that_fails_otherwise_is_left_to_the_lease() -> None:
    reporter = Reporter(refuse=set(), error=Unavailable("server away"))
    assert not await hand_back_cut(reporter, request())  # type: ignore[arg-type]
    assert reporter.sent == ["CUT"]
    refused = Reporter(refuse=set(), error=InvalidArgument("lease_owner 'w' does not hold task t"))
    assert not await hand_back_cut(refused, request())  # type: ignore[arg-type]
    assert refused.sent == ["CUT"]
