"""The run progress bar's counts (:class:`cyclone_flow.cli.progress.StepCounts`): a full
bar of a run with a discarded or cancelled step says so."""

from __future__ import annotations

from datetime import UTC, datetime

from cyclone_flow.cli.progress import StepCounts
from cyclone_flow.db.rows import Step
from cyclone_flow.states import StepState

_AT = datetime(2026, 12, 1, tzinfo=UTC)


def _step(node: str, state: StepState, errors: int = 0) -> Step:
    return Step(
        id=1, node=node, type="action", call="m:f", state=state, queue="default", priority=0,
        attempt=1, max_attempts=3, reclaims=0, lease_owner=None, lease_expiry=None,
        lease_generation=1, started_at=None, finished_at=None, scheduled_at=_AT, output=None,
        error=None, error_kind=None, errors=[{"error": "x"}] * errors,
    )  # fmt: skip


def test_counts_tell_discarded_and_cancelled_steps_apart_from_completed() -> None:
    steps = [
        _step("a", StepState.COMPLETED),
        _step("b", StepState.DISCARDED, errors=3),
        _step("c", StepState.CANCELLED),
        _step("d", StepState.CANCELLED),
        _step("e", StepState.RUNNING),
    ]
    counts = StepCounts.of(steps)
    assert (counts.total, counts.done, counts.running, counts.failed) == (5, 4, 1, 3)
    assert counts.not_completed() == ", 1 discarded, 2 cancelled"
    assert StepCounts.of([_step("a", StepState.COMPLETED)]).not_completed() == ""
