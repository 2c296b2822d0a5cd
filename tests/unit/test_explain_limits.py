"""Why a step held back by its limits waits (issue 20), on rows: the
concurrency key at its limit, the rate key out of claims until its window ends, and
neither once the slot or the window frees (pure: engine/explain.py:explain)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from cyclone_flow.db.rows import RateWindow, Run, Step, WorkerRow
from cyclone_flow.engine.explain import Snapshot, WaitReason, explain
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


def test_rate_key_out_of_claims_until_the_window_ends() -> None:
    step = replace(STEP, rate_key="feed", rate_limit=5, rate_per_s=4.0)
    window = RateWindow("feed", NOW.replace(microsecond=0) - timedelta(seconds=1), 5)
    reason, text = _why(step, windows={"feed": window})
    assert reason is WaitReason.RATE_LIMIT
    assert text == "rate limit feed: next token in 2.5 s (5 of 5 claims per 4s taken)"
    # the window has room, or it is over: no limit reason
    assert _why(step, windows={"feed": replace(window, claims=4)})[0] is WaitReason.QUEUED
    old = replace(window, window_start=NOW - timedelta(seconds=10))
    assert _why(step, windows={"feed": old})[0] is WaitReason.QUEUED


def test_no_live_worker_comes_first() -> None:
    step = replace(STEP, concurrency_key="pay/c-42", concurrency_limit=1)
    dead = replace(WORKER, live=False)
    w = explain(Snapshot(RUN, [step], {}, {}, [dead], NOW, slots={"pay/c-42": 1}))["charge"]
    assert w.reason is WaitReason.NO_WORKER
