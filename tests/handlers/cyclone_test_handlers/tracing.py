"""Handlers for the trace tests (tests/integration/test_tracing.py)."""

from __future__ import annotations

from typing import Any

from cyclone_flow.flowfile import load_flow_text

JOB = load_flow_text(
    """
name: traced_job
nodes:
  job:
    call: cyclone_test_handlers.basic:echo
"""
)


def fail_first(ctx: Any, input: Any) -> Any:
    """Raises on its first attempt, returns on the next ones."""
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    return {"attempt": ctx.attempt}


def submit_job(ctx: Any, input: Any) -> Any:
    """Submits a ``traced_job`` run in the completion transaction."""
    return {"job": ctx.submit_completion(JOB, {"from": ctx.run_id})}
