"""``cyclone-flow status RUN``'s steps table (the real console script): on a narrow
terminal a long node name wraps after its ``_`` (never in the middle of a word), and
neither there nor in a pipe does it show a column that is empty in every row."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import Runner, no_traceback
from helpers.pty_cli import PtyProcess, screen

FLOW = """\
name: long-names
nodes:
  fetch_customer_profile_records:
    call: cyclone_test_handlers.basic:echo
    queue: unserved
  send_weekly_summary_email_to_everyone:
    call: cyclone_test_handlers.basic:echo
    needs: [fetch_customer_profile_records]
"""


def _run(cli: Runner, tmp_path: Path) -> str:
    flow = tmp_path / "long.yaml"
    flow.write_text(FLOW, encoding="utf-8")
    done = cli("submit", flow)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _table(lines: list[str]) -> list[str]:
    return [line for line in lines if line[:1] in "┏┃┡│└"]


def test_status_on_a_narrow_terminal_wraps_node_names_after_underscores(
    cli: Runner, tmp_path: Path, database_url: str, schema: str
) -> None:
    run_id = _run(cli, tmp_path)
    shown = PtyProcess(
        "status", run_id, "--database-url", database_url, "--schema", schema, columns=60
    )
    try:
        assert shown.wait(timeout=60) == 0, shown.raw
    finally:
        shown.kill()
    table = _table(screen(shown.raw))
    assert table, shown.raw
    assert all(len(line) <= 60 for line in table), "\n".join(table)
    cells = [line.split("│")[1].strip() for line in table if line.startswith("│")]
    # each name in lines of at most 12 (a fifth of 60), broken after an underscore only
    assert cells == [
        "fetch_",
        "customer_",
        "profile_",
        "records",
        "send_weekly_",
        "summary_",
        "email_to_",
        "everyone",
    ], "\n".join(table)
    queues = [line.split("│")[5].strip() for line in table if line.startswith("│")]
    assert "unserved" in queues, "\n".join(table)  # the other columns are not folded either
    header = next(line for line in table if line.startswith("┃"))
    for empty in ("took", "detail", "error"):  # no step has one yet
        assert empty not in header, header


def test_status_in_a_pipe_keeps_names_whole_and_drops_empty_columns(
    cli: Runner, tmp_path: Path
) -> None:
    run_id = _run(cli, tmp_path)
    proc = cli("status", run_id)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    table = _table(proc.stdout.splitlines())
    header = next(line for line in table if line.startswith("┃"))
    cells = [c.strip() for c in header.split("┃")[1:-1]]
    assert cells == ["node", "state", "attempt", "reclaims", "queue"], header
    rows = [line for line in table if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == [
        "fetch_customer_profile_records",
        "send_weekly_summary_email_to_everyone",
    ]
    assert all(len(line) < 100 for line in table), "\n".join(table)
