"""The one wording of a step (cyclone_flow/describe.py), on rows: the detail line of each
node type, the error, the one duration style, the wait reasons and a run's queue facts,
as the CLI prints them and the dashboard's templates lay them out."""

from __future__ import annotations

import warnings
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from cyclone_flow import describe
from cyclone_flow.db.rows import QueueInfo, Step
from cyclone_flow.describe import (
    DetailPart,
    detail_parts,
    duration,
    queue_info_lines,
    step_detail,
    step_error,
    step_took,
    wait_line,
    wait_text,
)
from cyclone_flow.explain import Waiting, WaitReason
from cyclone_flow.states import StepState

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
ACTION = Step(
    1, "charge", "action", "m:f", StepState.RUNNING, "default", 0, 1, 3, 0, None, None, 1,
    NOW - timedelta(seconds=245), None, NOW - timedelta(seconds=250), None, None, None, [],
)  # fmt: skip
RERUN_OF = "3f2a9c1e-0000-4000-8000-000000000000"


def test_an_action_has_no_detail_and_runs_for_so_long() -> None:
    assert detail_parts(ACTION, {}) == [] and step_detail(ACTION, {}) == ""
    assert step_took(ACTION, NOW) == "4 min 05 s"  # running: so far
    done = replace(ACTION, state=StepState.COMPLETED, finished_at=ACTION.started_at)
    assert step_took(done, NOW) == "0 ms"
    assert step_took(replace(ACTION, started_at=None), NOW) == ""
    # stopped without finishing (given back, rescued): no duration
    assert step_took(replace(ACTION, state=StepState.AVAILABLE), NOW) == ""


def test_one_duration_style() -> None:
    assert duration(NOW, NOW + timedelta(seconds=0.25)) == "250 ms"
    assert duration(NOW, NOW + timedelta(seconds=12.34)) == "12.3 s"
    assert duration(NOW, NOW + timedelta(seconds=7380)) == "2 h 03 min"
    assert duration(None, NOW) == duration(NOW, None) == ""


def test_times_from_now_and_short_run_ids_in_the_one_style() -> None:
    # the dashboard's "created", "scheduled at", "expires", "next run" (they said "45s",
    # "5m", "1.5h ago")
    assert describe.relative(NOW - timedelta(seconds=245), NOW) == "4 min 05 s ago"
    assert describe.relative(NOW + timedelta(seconds=12.3), NOW) == "in 12.3 s"
    assert describe.relative(NOW - timedelta(hours=1.5), NOW) == "1 h 30 min ago"
    assert describe.relative(NOW, NOW) == "0 ms ago"
    assert describe.relative(None, NOW) == ""
    assert describe.short_id(RERUN_OF) == "3f2a9c1e"


def test_a_fan_out_node_counts_its_items() -> None:
    fan = replace(ACTION, node="each", type="fan_out", state=StepState.WAITING, items_done=None)
    assert step_detail(fan, {}) == "items: not started"
    fan = replace(fan, items_total=100, items_done=42)
    counts = {"each": {"completed": 42, "running": 8, "pending": 50}}
    assert detail_parts(fan, counts) == [DetailPart("items", "items 42/100 done, 8 running")]
    item = replace(ACTION, node="each[3]", parent_node="each", item_index=3)
    assert step_detail(item, counts) == "item 3 of each"


def test_signal_child_skip_and_reuse() -> None:
    until = NOW + timedelta(hours=1)
    gate = replace(
        ACTION, node="gate", type="wait_signal", state=StepState.WAITING, signal="approved"
    )
    assert step_detail(replace(gate, wait_until=until), {}) == (
        "awaits signal 'approved' until 2026-12-01T13:00:00+00:00"
    )
    assert step_detail(replace(gate, state=StepState.COMPLETED), {}) == "signal 'approved'"
    kid = replace(ACTION, node="kid", type="child", state=StepState.WAITING)
    assert step_detail(kid, {}) == "child run: not started"
    assert detail_parts(replace(kid, child_run_id="c-1"), {}) == [
        DetailPart("child", "child run c-1")
    ]
    skipped = replace(
        ACTION,
        state=StepState.SKIPPED,
        skip_reason={"when": "run.input.go", "values": {"run.input.go": False}},
    )
    assert (
        step_detail(skipped, {}) == "skipped: when 'run.input.go' was false (run.input.go = false)"
    )
    reused = replace(skipped, reused_from=7)
    assert [p.kind for p in detail_parts(reused, {}, RERUN_OF)] == ["skip", "reuse"]
    assert step_detail(reused, {}, RERUN_OF) == (
        "skipped: when 'run.input.go' was false (run.input.go = false); "
        "reused from run 3f2a9c1e (node charge)"
    )
    assert step_detail(replace(ACTION, reused_from=7), {}) == "reused"  # not a rerun
    upstream = replace(ACTION, state=StepState.SKIPPED, skip_reason={"upstream": "a"})
    assert step_detail(upstream, {}) == "skipped: upstream a was skipped"


def test_a_steps_error_unless_it_completed() -> None:
    failed = replace(ACTION, state=StepState.DISCARDED, error="boom", error_kind="handler_error")
    assert step_error(failed) == "[handler_error] boom"
    assert step_error(replace(failed, state=StepState.COMPLETED)) == ""  # an earlier attempt's
    assert step_error(ACTION) == ""


def test_attempts() -> None:
    assert describe.describe_attempt(2, 3, 2) == "2/3"
    assert describe.describe_attempt(1, 3, 0) == describe.NO_ATTEMPT == "–"


def test_wait_reasons_said_once() -> None:
    limit = Waiting("a", WaitReason.CONCURRENCY, "waiting: concurrency key k at limit 2", "q")
    assert wait_text(limit) == "concurrency key k at limit 2"
    assert wait_line("a", limit) == "waiting: a: concurrency key k at limit 2"
    needs = Waiting("c", WaitReason.NEEDS, "waits for a (available)", "q")
    assert wait_line("c", needs) == "waiting: c: waits for a (available)"


def test_queue_info_lines() -> None:
    none = QueueInfo(None, False, ["running"], None, None, False, None, None)
    assert queue_info_lines(none) == [] and queue_info_lines(None) == []
    full = QueueInfo("order-42", True, ["running", "completed"], "acct", 3, True, 9, NOW)
    assert queue_info_lines(full) == [
        "unique key 'order-42' (held while running, completed)",
        "sequence 'acct' #3: held until the earlier runs of the sequence complete or are cancelled",
        "scheduled tick 2026-12-01T12:00:00+00:00",
    ]
    free = replace(full, unique_held=False, sequence_held=False, scheduled_for=None)
    assert queue_info_lines(free) == [
        "unique key 'order-42' (released)",
        "sequence 'acct' #3",
        "triggered from its schedule (no tick)",
    ]
    assert full.as_dict()["unique_states"] == ["running", "completed"]


def test_the_engine_explain_module_is_a_deprecated_alias() -> None:
    from cyclone_flow import explain
    from cyclone_flow.engine import explain as old

    with pytest.warns(DeprecationWarning, match="cyclone_flow.explain"):
        assert old.WaitReason is explain.WaitReason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert explain.read_snapshot is not None  # the new path does not warn
