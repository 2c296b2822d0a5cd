"""Handlers of the wrong shape: an async generator and a handler that cannot be
called as ``handler(ctx, input)`` fail their step at once (``import_error``, one attempt,
no retry) with a message naming the expected form; extra parameters with defaults are
fine, and so are an ``async def`` handler, an async callable object and a
``def`` that returns a coroutine: the worker runs the coroutine on its event loop."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cyclone_flow import Client
from cyclone_flow.flowfile import Flow, load_flow_text


def _one(call: str) -> Flow:
    return load_flow_text(
        f"name: shape\nnodes:\n  s:\n    call: {call}\n"
        "    retry: {max_attempts: 3, backoff: {initial: 10ms}}\n"
    )


@pytest.mark.parametrize(
    ("handler", "kind", "needle"),
    [
        ("async_generator", "import_error", "is an async generator function"),
        ("one_parameter", "import_error", "cannot be called as handler(ctx, input)"),
        ("three_required", "import_error", "def three_required(ctx, input)"),
    ],
)
def test_a_handler_of_the_wrong_shape_fails_once_without_retry(
    make_client: Callable[..., Client], handler: str, kind: str, needle: str
) -> None:
    client = make_client(lease_ttl=1.0)
    run_id = client.submit(_one(f"cyclone_test_handlers.shapes:{handler}"))
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    (step,) = client.list_steps(run_id)
    assert step.state == "discarded" and step.attempt == 1, step.errors
    assert step.error_kind == kind and needle in (step.error or ""), step.error


@pytest.mark.parametrize("handler", ["async_handler", "async_callable", "returns_coroutine"])
def test_a_coroutine_handler_runs_and_returns_its_output(
    make_client: Callable[..., Client], handler: str
) -> None:
    client = make_client()
    run_id = client.submit(_one(f"cyclone_test_handlers.shapes:{handler}"))
    client.start()
    run = client.wait(run_id, timeout=20)
    assert (run.state, run.output) == ("completed", {"s": {"ran": True}}), run.error


def test_extra_parameters_with_defaults_are_a_valid_handler(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    run_id = client.submit(_one("cyclone_test_handlers.shapes:with_defaults"), None)
    client.start()
    run = client.wait(run_id, timeout=20)
    assert run.state == "completed", run.error
