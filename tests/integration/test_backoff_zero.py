"""A zero backoff (``initial: 0s`` or ``max: 0s``, which the schema allows) retries at
once instead of breaking the failure transition (ln(0) / division by zero in SQL), which
would leave the step to its lease and re-run it forever."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text


@pytest.mark.parametrize("backoff", ["{initial: 0s}", "{max: 0s}", "{initial: 0s, max: 0s}"])
def test_zero_backoff_retries_at_once(make_client: Callable[..., Client], backoff: str) -> None:
    flow = load_flow_text(
        f"""
name: zero_backoff
nodes:
  s:
    call: cyclone_test_handlers.ops:flaky
    retry: {{max_attempts: 3, backoff: {backoff}}}
"""
    )
    client = make_client(workers=1, allow_modules=["cyclone_test_handlers"])
    client.start()
    run_id = client.submit(flow, {"succeed_on": 3})
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    (step,) = client.list_steps(run_id)
    assert (step.attempt, step.reclaims) == (3, 0)
    assert [e["error"] for e in step.errors] == [
        "RuntimeError: flaky attempt 1",
        "RuntimeError: flaky attempt 2",
    ]
