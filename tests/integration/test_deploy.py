"""Deploying flow files as revisions (issue 33): ``Client.deploy`` / ``diff`` /
``rollback`` / ``retire``, the history reads, and submitting a deployed flow by name."""

from __future__ import annotations

import cyclone_flow
from cyclone_flow.errors import (
    CompatibilityError,
    DeployLintError,
    FlowError,
    FlowNotDeployedError,
    FlowRetiredError,
    RevisionNotFoundError,
)


def test_the_deploy_errors_are_exported_with_exit_code_1() -> None:
    for error in (
        CompatibilityError,
        DeployLintError,
        FlowNotDeployedError,
        FlowRetiredError,
        RevisionNotFoundError,
    ):
        assert getattr(cyclone_flow, error.__name__) is error
        assert error.exit_code == 1
    assert issubclass(DeployLintError, FlowError)
