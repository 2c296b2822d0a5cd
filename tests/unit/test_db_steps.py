"""``cyclone_flow.db.steps``: the failure fields of the fail statements, one frozen
``FailParams`` that every function of the failure path takes."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from cyclone_flow.db import steps
from cyclone_flow.db.queries import statements
from cyclone_flow.db.steps import FailParams
from cyclone_flow.engine import fail
from cyclone_flow.states import ErrorKind

FAIL_STATEMENTS = ("step_fail_if_leased", "step_fail_without_backoff_if_leased")


def _attempt() -> FailParams:
    return FailParams(
        step_id=7,
        run_id="r1",
        generation=3,
        owner="host-1",
        error="boom",
        error_kind=ErrorKind.HANDLER_ERROR,
        traceback="Traceback ...",
        permanent=True,
    )


@pytest.mark.parametrize("name", FAIL_STATEMENTS)
def test_the_params_are_the_placeholders_of_the_fail_statements(name: str) -> None:
    placeholders = set(re.findall(r"%\((\w+)\)s", statements()[name]))
    params = _attempt().params()
    assert set(params) == placeholders
    assert params["id"] == 7 and params["error_kind"] == "handler_error"
    assert type(params["error_kind"]) is str  # the value, not the enum member


def test_fail_params_is_frozen_and_slotted() -> None:
    attempt = _attempt()
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.error = "other"  # type: ignore[misc]
    assert not hasattr(attempt, "__dict__")
    defaults = FailParams(1, "r", 1, None, "e", "timeout")
    assert (defaults.traceback, defaults.permanent, defaults.timed_out) == (None, False, False)


@pytest.mark.parametrize(
    "function",
    [
        steps.send_step_fail_if_leased,
        steps.step_fail_if_leased,
        steps.send_step_fail_without_backoff_if_leased,
        steps.step_fail_without_backoff_if_leased,
        fail.fail_step,
        fail.fail_step_alone,
    ],
)
def test_the_failure_path_takes_the_fields_as_one_fail_params(function: object) -> None:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    assert "failure" in parameters
    assert not {"generation", "owner", "error", "error_kind", "traceback"} & set(parameters)
