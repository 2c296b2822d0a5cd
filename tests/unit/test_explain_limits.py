"""Why a step held back by its limits waits, on rows: the
concurrency key at its limit, the rate key out of claims until enough of its claims leave
the sliding window, and neither once the slot or the window frees (pure:
explain.py:explain)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cyclone_flow.db.rows import RateWindow, Run, Step, WorkerRow
from cyclone_flow.explain import Snapshot, WaitReason, explain
from cyclone_flow.states import RunState, StepState

NOW = datetime(2026, 12, 1, 12, 0, 0, 500_000, tzinfo=UTC)
RUN = Run("r-1", "shop", RunState.RUNNING, {}, None, None, None, NOW, None, "d")
WORKER = WorkerRow("w", "host", 1, ["default"], [4], None, 30.0, "1", NOW, NOW, True, 0.1)
STEP = Step(
    1, "charge", "action", "m:f", StepState.AVAILABLE, "default", 0, 1, 1, 0, None, None, 0,
    None, None, NOW - timedelta(seconds=5), None, None, None, [],
)  # fmt: skip


def _why(
    step: Step,
    slots: dict[str, int] | None = None,
    windows: dict[str, RateWindow] | None = None,
) -> tuple[WaitReason, str]:
    snap = Snapshot(RUN, [step], {}, {}, [WORKER], NOW, slots=slots or {}, windows=windows or {})
    w = explain(snap)["charge"]
    return w.reason, w.text


def test_concurrency_key_at_its_limit() -> None:
    step = replace(STEP, concurrency_key="pay/c-42", concurrency_limit=2)
    reason, text = _why(step, slots={"pay/c-42": 2})
    assert reason is WaitReason.CONCURRENCY
    assert text.startswith("waiting: concurrency key pay/c-42 at limit 2 (2 running)")
    assert _why(step, slots={"pay/c-42": 1})[0] is WaitReason.QUEUED


def _log(*buckets: tuple[float, int], per_s: float = 4.0) -> RateWindow:
    """A sliding log of buckets (end in seconds from NOW, claims)."""
    ends = [NOW + timedelta(seconds=at) for at, _ in buckets]
    return RateWindow("feed", per_s, ends, [n for _, n in buckets])


def test_rate_key_out_of_claims_until_its_oldest_claims_leave_the_window() -> None:
    step = replace(STEP, rate_key="feed", rate_limit=5, rate_per_s=4.0)
    # 2 claims counted at 3 s ago, 3 at 1 s ago: 5 of 5 in the last 4 s; the first two
    # leave the window 1 s from now
    window = _log((-3.0, 2), (-1.0, 3))
    reason, text = _why(step, windows={"feed": window})
    assert reason is WaitReason.RATE_LIMIT
    assert text == "rate limit feed: next token in 1.0 s (5 of 5 claims per 4s taken)"
    w = explain(Snapshot(RUN, [step], {}, {}, [WORKER], NOW, windows={"feed": window}))
    assert w["charge"].claimable_at == NOW + timedelta(seconds=1)
    # room left, or the buckets have left the window (ends 4 s ago or more): no limit reason
    assert _why(step, windows={"feed": _log((-3.0, 1), (-1.0, 3))})[0] is WaitReason.QUEUED
    assert _why(step, windows={"feed": _log((-4.0, 5), (-9.0, 5))})[0] is WaitReason.QUEUED


def test_rate_key_over_a_lowered_limit_waits_for_enough_buckets_to_leave() -> None:
    # 7 counted against a limit of 5: 3 must leave; the first bucket frees 2, the second 3
    step = replace(STEP, rate_key="feed", rate_limit=5, rate_per_s=4.0)
    window = _log((-1.0, 3), (-3.0, 2), (-0.5, 2))  # as stored or not: the rule sorts
    reason, text = _why(step, windows={"feed": window})
    assert reason is WaitReason.RATE_LIMIT
    assert text == "rate limit feed: next token in 3.0 s (7 of 5 claims per 4s taken)"


def test_no_live_worker_comes_first() -> None:
    step = replace(STEP, concurrency_key="pay/c-42", concurrency_limit=1)
    dead = replace(WORKER, live=False)
    w = explain(Snapshot(RUN, [step], {}, {}, [dead], NOW, slots={"pay/c-42": 1}))["charge"]
    assert w.reason is WaitReason.NO_WORKER
