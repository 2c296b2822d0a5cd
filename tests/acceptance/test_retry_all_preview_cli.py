"""``retry --all-failed`` previews what it would retry and asks: the
count and the first runs on stderr, then a question on a terminal (a pty: "n" retries
nothing, "y" retries them); without a terminal it refuses without ``--yes`` (exit 2,
nothing retried). The real script in a subprocess."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.cli import WORKER, Runner, no_traceback
from helpers.pty_cli import PtyProcess, screen

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow

DOOMED = "name: doomed\nnodes:\n  a: {call: 'cyclone_test_handlers.ops:always_fails'}\n"


def _failed_runs(
    cli: Runner, make_client: Callable[..., Client], tmp_path: Path, count: int
) -> list[str]:
    """``count`` failed runs of ``DOOMED``, oldest first: submitted one by one through the
    API (as ``cyclone-flow submit`` does; a process each took most of the test's time),
    failed by a real worker process."""
    flow = tmp_path / "doomed.yaml"
    flow.write_text(DOOMED)
    client = make_client()
    ids = [str(client.submit(load_flow(flow), None)) for _ in range(count)]
    assert cli(*WORKER).returncode == 0
    return ids


def _states(db: Any, ids: list[str]) -> set[str]:
    rows = db.execute("SELECT state FROM cyclone_runs WHERE id = ANY(%s::uuid[])", (ids,))
    return {r[0] for r in rows.fetchall()}


def test_in_a_pipe_it_previews_and_refuses_without_yes(
    cli: Runner, make_client: Callable[..., Client], tmp_path: Path, db: Any
) -> None:
    ids = _failed_runs(cli, make_client, tmp_path, 12)
    proc = cli("retry", "--all-failed")
    no_traceback(proc)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert "12 failed run(s) to retry:" in lines, proc.stderr
    previewed = [line for line in lines if line.startswith("  ") and "doomed" in line]
    assert [line.split()[0] for line in previewed] == ids[:10], proc.stderr  # oldest first
    assert "step a discarded: RuntimeError: always fails" in previewed[0]
    assert "  ... and 2 more" in lines
    assert "pass --yes" in proc.stderr and "nothing was retried" in proc.stderr
    assert _states(db, ids) == {"failed"}

    yes = cli("retry", "--all-failed", "--yes")
    no_traceback(yes)
    assert yes.returncode == 0, yes.stderr
    assert yes.stdout.split() == ids and "retried 12 failed run(s)" in yes.stderr
    assert _states(db, ids) == {"running"}


def test_on_a_terminal_it_asks_and_no_retries_nothing(
    cli: Runner,
    make_client: Callable[..., Client],
    tmp_path: Path,
    db: Any,
    database_url: str,
    schema: str,
) -> None:
    ids = _failed_runs(cli, make_client, tmp_path, 2)
    db_args = ("--database-url", database_url, "--schema", schema)
    for answer, code, state in (("n", 1, "failed"), ("y", 0, "running")):
        asked = PtyProcess("retry", "--all-failed", *db_args)
        try:
            asked.wait_for("retry 2 run(s)? [y/N]:")
            shown = screen(asked.raw)
            assert "2 failed run(s) to retry:" in shown
            assert sum(line.startswith(f"  {ids[0]}  doomed") for line in shown) == 1, shown
            assert _states(db, ids) == {"failed"}, "nothing retried before the answer"
            asked.type(answer + "\n")
            assert asked.wait(timeout=60) == code, asked.raw
        finally:
            asked.kill()
        assert "Traceback" not in asked.raw
        assert _states(db, ids) == {state}, answer
