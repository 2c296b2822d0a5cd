"""``cyclone-flow workers`` through the real CLI: a running ``cyclone-flow
worker`` process is listed live with its queues and pid, and its clean shutdown removes
it."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import Runner, json_output, no_traceback
from helpers.procs import WorkerProcess, wait_until


def test_workers_lists_a_running_worker_then_none_after_its_shutdown(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    empty = cli("workers")
    assert empty.returncode == 0 and empty.stdout.strip() == "no workers", empty.stderr
    assert json_output(cli("workers", "--json").stdout) == []
    proc = WorkerProcess(
        database_url, schema, tmp_path / "w.log", extra_args=["--queue", "emails=3"]
    )
    try:
        listed = wait_until(
            lambda: json_output(cli("workers", "--json").stdout), timeout=30, what="a row"
        )
        (row,) = listed
        assert row["pid"] == proc.pid and row["live"] is True
        assert row["queues"] == {"emails": 3}
        assert row["heartbeat_at"][10] == "T"  # ISO 8601
        text = cli("workers", env=None)
        no_traceback(text)
        assert "live" in text.stdout and row["client_id"] in text.stdout
        assert "emails:3" in text.stdout
    finally:
        assert proc.terminate() == 0
    assert json_output(cli("workers", "--json").stdout) == []
