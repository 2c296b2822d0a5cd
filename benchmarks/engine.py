"""Shared shape of the engine benchmarks: a fresh schema, a backlog written through the
engine's submit path, a worker process ``Client(workers=N)`` timed until every run ended,
and the throughput read from the database's own timestamps."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from benchmarks.common import (
    Env,
    Result,
    WorkerReport,
    per_step_details,
    run_span,
    run_worker,
    schema_for,
    step_span,
    submit_backlog,
)
from cyclone_flow.flowfile.model import JSON, Flow


def measure(
    env: Env,
    *,
    name: str,
    prefix: str,
    flow: Flow,
    inputs: Callable[[str], Iterable[JSON]],
    runs: int,
    steps_per_run: int | None,
    workers: int,
    per: str = "steps",
    setup: Callable[[str], None] | None = None,
    check: Callable[[str], None] | None = None,
    timeout_s: float = 900.0,
    rss_every_s: float = 0.0,
    options: dict[str, Any] | None = None,
    processes: int = 1,
) -> tuple[Result, WorkerReport]:
    """Submit ``runs`` runs of ``flow`` (inputs made from the schema name), run a worker
    with ``workers`` threads until they all ended, and return the figure: ``steps/s``
    (completed steps over the span from the first claim to the last completion) or, with
    ``per="runs"``, ``runs/s`` (completed runs over the span from the first claim to the
    last run finish). ``steps_per_run`` None skips the step count check. ``processes``:
    worker processes of ``workers`` threads each, run at once. Raises RuntimeError when a
    run failed or a count is off."""
    with schema_for(env, prefix) as schema:
        if setup is not None:
            setup(schema)
        submitted, submit_s = submit_backlog(env, schema, flow, inputs(schema))
        report = run_worker(
            env,
            schema,
            workers=workers,
            timeout_s=timeout_s,
            rss_every_s=rss_every_s,
            options=options,
            processes=processes,
        )
        steps, step_s = step_span(env, schema)
        done_runs, run_s = run_span(env, schema)
        if check is not None:
            check(schema)
    expected_steps = steps if steps_per_run is None else runs * steps_per_run
    if report.runs_failed or done_runs != runs or steps != expected_steps:
        raise RuntimeError(
            f"{name}: {done_runs}/{runs} runs and {steps}/{expected_steps} steps "
            f"completed, {report.runs_failed} runs failed"
        )
    steps_per_s = steps / step_s if step_s else 0.0
    runs_per_s = done_runs / run_s if run_s else 0.0
    extra: dict[str, Any] = {
        "runs": runs,
        "processes": processes,
        "steps": steps,
        "steps_per_s": round(steps_per_s, 1),
        "runs_per_s": round(runs_per_s, 1),
        "span_s": round(run_s if per == "runs" else step_s, 3),
        "submit_runs_per_s": round(submitted / submit_s, 1) if submit_s else None,
        **per_step_details(report, steps),
    }
    value = runs_per_s if per == "runs" else steps_per_s
    return (
        Result(
            name,
            workers,
            round(value, 1),
            f"{per}/s",
            peak_rss_mib=round(report.peak_rss_mib, 1),
            extra=extra,
        ),
        report,
    )
