"""AdvanceRun step records are built in one place, in the shapes wiggle._fast's batch codec decodes."""

from __future__ import annotations

from wiggle._engine.records import PredicateDone, StepFailed, TaskDone
from wiggle._fast import decode_batch
from wiggle._worker.outcomes import Failure, outcome_of
from wiggle._worker.records import ContextDiff, encode_records, step_record


def test_each_kind_of_record_round_trips_through_the_batch_codec() -> None:
    records = [
        step_record("a", ContextDiff({"x": 1}, ["y"])),
        step_record("b", True),
        step_record("c", Failure("ValueError: bad", False)),
    ]
    assert decode_batch(encode_records(records)) == [
        TaskDone("a", {"x": 1}, ["y"]),
        PredicateDone("b", True),
        StepFailed("c", "ValueError: bad", False),
    ]


def test_outcomes_name_the_problem() -> None:
    bad = outcome_of("PREDICATE", "p", "yes", {})
    assert isinstance(bad, Failure) and not bad.retryable
    assert bad.message == "predicate 'p' returned str, not bool"
    wrong = outcome_of("TASK", "t", 3, {})
    assert isinstance(wrong, Failure) and "return the context (or None)" in wrong.message
    assert outcome_of("TASK", "t", None, {"a": 1}) is None
    assert outcome_of("COMBINE", "j", None, {"base": {"a": 1}}) == {"a": 1}
