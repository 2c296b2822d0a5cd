"""``cyclone-flow run`` on a terminal: a log line written while the
progress bar is drawn comes out above the bar instead of through it, and each failed
attempt is told once (the worker's own log lines about it and about the run's end are
left out: the display tells them). The real script on a pty."""

from __future__ import annotations

import re
from pathlib import Path

from helpers.pty_cli import PtyProcess, screen

HANDLERS = '''
import logging
import time
from pathlib import Path

log = logging.getLogger("barlog")


def noisy(ctx, input):
    """Once the test saw the bar (the go file): log a warning, then fail attempt 1."""
    go = Path(input["go"])
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    log.warning("a warning under the bar, attempt %d", ctx.attempt)
    if ctx.attempt == 1:
        raise RuntimeError("noisy attempt 1 fails")
    return {"attempt": ctx.attempt}


def doomed(ctx, input):
    raise RuntimeError(f"doomed attempt {ctx.attempt} fails")
'''
FLOW = """
name: barred
nodes:
  a:
    call: barmods:noisy
    input: {go: "${{ run.input.go }}"}
    retry: {max_attempts: 2, backoff: {initial: 0s}}
  b:
    call: barmods:doomed
    needs: [a]
    retry: {max_attempts: 2, backoff: {initial: 0s}}
"""
LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ WARNING barlog: a warning under the bar"
)


def test_logs_go_above_the_bar_and_each_failed_attempt_is_told_once(
    database_url: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "barmods.py").write_text(HANDLERS)
    flow = tmp_path / "barred.yaml"
    flow.write_text(FLOW)
    go = tmp_path / "go"
    run = PtyProcess(
        "run",
        flow,
        "--input",
        f'{{"go": "{go}"}}',
        "--import-path",
        tmp_path,
        "--database-url",
        database_url,
        "--schema",
        schema,
        cwd=tmp_path,
    )
    try:
        run.wait_for("steps")  # the bar: "run 1a2b3c4d ━━━ 0/2 steps  1 running"
        go.write_text("go")
        code = run.wait(timeout=120)
    finally:
        run.kill()
    shown = [line for line in screen(run.raw) if line.strip()]
    text = "\n".join(shown)
    assert code == 1, text
    assert "Traceback" not in run.raw
    # each warning on a line of its own, not drawn over (or after) the bar
    warnings = [line for line in shown if "a warning under the bar" in line]
    assert len(warnings) == 2, text
    assert all(LOG_LINE.match(line) for line in warnings), text
    # each failed attempt told once: a's first, b's two
    for needle in ("noisy attempt 1 fails", "doomed attempt 1 fails", "doomed attempt 2 fails"):
        assert sum(needle in line for line in shown) == 1, (needle, text)
    assert "  step a attempt 1 failed: RuntimeError: noisy attempt 1 fails" in shown, text
    assert "  step b attempt 1 failed: RuntimeError: doomed attempt 1 fails" in shown, text
    # the bar is whole: its last state is on a line of its own, with the run's end after
    bars = [line for line in shown if re.search(r"\d+/\d+ steps", line)]
    assert bars and bars[-1].startswith("run ") and "failed" in bars[-1], text
