"""The run timeline of the dashboard (:mod:`cyclone_flow.ui.timeline`): a wait bar and a
run bar per node on one axis, items left out, rows capped, every text escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("markupsafe", reason="the ui extra is not installed")

from cyclone_flow.db.rows import Run, Step
from cyclone_flow.states import RunState, StepState
from cyclone_flow.ui.timeline import CHART_W, LABEL_W, MAX_ROWS, render_timeline, timeline_rows

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _run(finished: float | None) -> Run:
    return Run(
        id="r1", flow_name="f", state=RunState.COMPLETED if finished else RunState.RUNNING,
        input=None, output=None, error=None, error_kind=None, created_at=T0,
        finished_at=_at(finished) if finished is not None else None, digest="d",
    )  # fmt: skip


def _step(
    node: str,
    state: StepState,
    scheduled: float,
    started: float | None = None,
    finished: float | None = None,
    parent: str | None = None,
) -> Step:
    return Step(
        id=1, node=node, type="action", call="m:f", state=state, queue="default", priority=0,
        attempt=1, max_attempts=1, reclaims=0, lease_owner=None, lease_expiry=None,
        lease_generation=1, started_at=_at(started) if started is not None else None,
        finished_at=_at(finished) if finished is not None else None,
        scheduled_at=_at(scheduled), output=None, error=None, error_kind=None, errors=[],
        parent_node=parent,
    )  # fmt: skip


def _bars(svg: str, node: str) -> dict[str, tuple[float, float]]:
    row = re.search(rf'<g class="row" data-node="{node}".*?</g>', svg)
    assert row is not None, svg
    return {
        kind.split()[0]: (float(x), float(w))
        for kind, x, w in re.findall(
            r'<rect class="([^"]+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', row.group()
        )
    }


def test_each_node_has_its_wait_and_its_run_on_one_axis() -> None:
    steps = [
        _step("a", StepState.COMPLETED, 0, 1, 3),
        _step("b", StepState.COMPLETED, 3, 5, 10),
        _step("b", StepState.COMPLETED, 5, 6, 7, parent="b"),  # an item: no row
        _step("c", StepState.PENDING, 0),
    ]
    rows = timeline_rows(steps)
    assert [r.node for r in rows] == ["a", "b", "c"]
    svg = str(render_timeline(_run(10), rows, _at(99), lambda n: f"/s/{n}"))
    per_s = CHART_W / 10
    assert _bars(svg, "a") == {
        "wait": (LABEL_W, per_s),
        "bar": (LABEL_W + per_s, 2 * per_s),
    }
    assert _bars(svg, "b")["bar"] == (LABEL_W + 5 * per_s, 5 * per_s)
    assert _bars(svg, "c") == {}  # pending: nothing yet
    assert 'href="/s/a"' in svg and ">10.0 s</text>" in svg  # the axis ends at the run's end


def test_a_running_step_runs_until_now_and_an_available_one_waits_until_now() -> None:
    steps = [_step("a", StepState.RUNNING, 0, 2), _step("b", StepState.AVAILABLE, 4)]
    svg = str(render_timeline(_run(None), timeline_rows(steps), _at(8), lambda n: n))
    per_s = CHART_W / 8
    assert _bars(svg, "a")["bar"] == (LABEL_W + 2 * per_s, 6 * per_s)
    assert _bars(svg, "b") == {"wait": (LABEL_W + 4 * per_s, 4 * per_s)}
    assert "running for 6.0 s" in svg


def test_names_are_escaped_and_rows_capped() -> None:
    hostile = '"><img src=x onerror=alert(1)>'
    steps = [_step(hostile, StepState.COMPLETED, 0, 1, 2)] + [
        _step(f"n{i}", StepState.COMPLETED, 0, 1, 2) for i in range(MAX_ROWS + 5)
    ]
    svg = str(render_timeline(_run(2), timeline_rows(steps), _at(3), lambda n: f"/s/{n}"))
    assert "<img" not in svg and "&lt;img" in svg
    assert svg.count('<g class="row"') == MAX_ROWS
    assert "… and 6 more nodes" in svg


def test_the_axis_labels_use_the_dashboard_s_one_duration_format() -> None:
    # format_span, as every duration of the dashboard (they mixed 0ms, 56.1s and 1m52s)
    steps = [_step("a", StepState.COMPLETED, 0, 1, 224.4)]
    svg = str(render_timeline(_run(224.4), timeline_rows(steps), _at(300), lambda n: n))
    labels = re.findall(r'<text class="axis"[^>]*>([^<]*)</text>', svg)
    assert labels == ["0 ms", "56.1 s", "1 min 52 s", "2 min 48 s", "3 min 44 s"]
    assert "ran 3 min 43 s" in svg
