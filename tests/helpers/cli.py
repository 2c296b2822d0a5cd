"""The real ``cyclone-flow`` script in a subprocess with a cleaned environment (as a user
would run it), and reading its output."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import CLI, TEST_HANDLERS
from helpers.procs import env_without_cyclone

Runner = Callable[..., subprocess.CompletedProcess[str]]

WORKER = (
    "worker",
    "--exit-when-idle",
    "--allow-module",
    "cyclone_test_handlers",
    "--import-path",
    str(TEST_HANDLERS),
    "--poll-interval",
    "20ms,200ms",
)
"""``cyclone-flow worker`` arguments for the test handlers, exiting once no work is left
(polling at most every 200 ms, the worker sees that within 0.2 s instead of the default
1 s; a later ``--poll-interval`` overrides it)."""


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without any CYCLONE_* setting or DEBUG, plus ``extra``."""
    env = env_without_cyclone()
    env.pop("DEBUG", None)
    env.update(extra)
    return env


def run_cli(
    *args: str | Path,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run ``cyclone-flow ARGS`` and return the finished process (text stdout/stderr)."""
    assert CLI.exists(), f"console script missing: {CLI}"
    return subprocess.run(
        [str(CLI), *map(str, args)],
        cwd=cwd,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_CRASH = re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    """Fail the test when the process printed a Python traceback of its own (at the start
    of a line; a handler's traceback that ``status`` shows is indented under its log line)."""
    assert not _CRASH.search(proc.stderr), proc.stderr
    assert not _CRASH.search(proc.stdout), proc.stdout


def json_output(text: str) -> Any:
    """``text`` (a command's stdout) parsed as JSON; fails the test naming the text when
    it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        pytest.fail(f"stdout is not JSON: {text!r}")
