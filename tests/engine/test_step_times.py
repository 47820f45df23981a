"""``step_times`` (wiggle/_engine/local_runs.py): a batch's steps laid back to back before its flush."""

from __future__ import annotations

from wiggle._engine.local_runs import step_times


def test_steps_end_one_after_another_at_the_flush_the_first_from_the_claim() -> None:
    assert step_times([50, 300, 120], 3, claimed_at=9_500, now=10_000) == [
        (9_500, 9_580),
        (9_580, 9_880),
        (9_880, 10_000),
    ]


def test_no_step_ends_before_the_claim() -> None:
    assert step_times([500, 100], 2, claimed_at=9_800, now=10_000) == [(9_800, 9_900), (9_900, 10_000)]
    assert step_times([500, 300], 2, claimed_at=9_800, now=10_000) == [(9_800, 9_800), (9_800, 10_000)]


def test_a_count_that_does_not_match_the_batch_is_ignored() -> None:
    assert step_times([], 3, 0, 10_000) == []
    assert step_times([10, 20], 3, 0, 10_000) == []
    assert step_times([-5], 1, 0, 10_000) == [(0, 10_000)]
