"""``cyclone-flow run`` exits as soon as its run is terminal: a step with
``timeout: 1s`` whose handler sleeps 40 s (and never looks at ctx.cancelled) fails the
run at about 2 s; ``run`` then prints the result and exits with the run's exit code at
once, abandoning the handler thread still running the timed-out attempt (its late
completion is refused by the lease generation), instead of waiting for that thread and
the shutdown timeout (it exited at about 21 s)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psycopg
from helpers.cli import clean_env, json_output, no_traceback
from helpers.paths import CLI, TEST_HANDLERS
from psycopg import sql

SLEEP = "cyclone_test_handlers.ops:short_sleep"
HANDLER_SLEEP_S = 40


def test_run_exits_with_the_runs_code_soon_after_a_timed_out_step_failed_it(
    database_url: str, schema: str, tmp_path: Path
) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "name: timed_out\nnodes:\n"
        f'  slow: {{call: "{SLEEP}", timeout: 1s, retry: {{max_attempts: 1}},'
        f' input: {{marker: "{tmp_path / "m"}", seconds: {HANDLER_SLEEP_S}}}}}\n',
        encoding="utf-8",
    )
    args = [str(CLI), "run", str(flow), "--json", "--workers", "1"]
    args += ["--import-path", str(TEST_HANDLERS), "--lease-ttl", "3s"]
    args += ["--database-url", database_url, "--schema", schema]
    began = time.monotonic()
    proc = subprocess.run(
        args, env=clean_env(), capture_output=True, text=True, timeout=120, check=False
    )
    took = time.monotonic() - began
    with psycopg.connect(database_url) as conn:
        (lingered,) = conn.execute(
            sql.SQL("SELECT extract(epoch FROM now() - finished_at) FROM {}.cyclone_runs").format(
                sql.Identifier(schema)
            )
        ).fetchone() or (None,)
    no_traceback(proc)
    out = json_output(proc.stdout)
    assert out["state"] == "failed", proc.stderr
    assert proc.returncode == 1, proc.stderr
    print(f"`cyclone-flow run` exited {took:.1f}s after it started, {lingered:.1f}s after the run")
    assert lingered < 5, f"exited {lingered:.1f}s after the run failed"
    # the run fails at about 2 s (timeout 1 s, then the worker or the deadline scanner);
    # process start, migrate and the first claim take a few seconds on a loaded machine
    assert took < 10, f"exited {took:.1f}s after start; the handler sleeps {HANDLER_SLEEP_S}s"
