"""Fixtures of the acceptance tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import Runner, run_cli


@pytest.fixture
def cli(database_url: str, schema: str) -> Runner:
    """``cli(command, *args)``: run a database command against the test's schema."""

    def runner(command: str, *args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run_cli(command, *args, "--database-url", database_url, "--schema", schema, **kwargs)

    return runner
