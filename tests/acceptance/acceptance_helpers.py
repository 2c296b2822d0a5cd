"""Shared helpers of the acceptance tests: the real `cyclone-flow` script in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FLOWS = EXAMPLES / "flows"
TEST_HANDLERS = REPO / "tests" / "handlers"
CLI = Path(sys.executable).parent / "cyclone-flow"

Runner = Callable[..., subprocess.CompletedProcess[str]]


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment without any CYCLONE_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CYCLONE_")}
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


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
