"""Step logs: what a handler prints (stdout, stderr), logs (``logging`` in its
thread, ``ctx.log``) and raises is kept per attempt in ``cyclone_step_logs``, bounded by
``step_log_bytes``, and deleted with its run; the process's stdout does not see the
handler's prints."""

from __future__ import annotations

import io
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cyclone_test_handlers.engine import event
from helpers.engine import database
from helpers.procs import wait_until
from rich.console import Console

from cyclone_flow import Client, ConfigError, RunNotFoundError
from cyclone_flow.cli.progress import follow_run
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.maintenance.retention import RetentionSweeper, RetentionSweeperConfig
from cyclone_flow.worker.step_logs import ThreadStream

CHATTY = load_flow_text(
    "name: chatty\nnodes:\n  s:\n    call: cyclone_test_handlers.chatty:chatty\n"
    "    retry: {max_attempts: 2, backoff: {initial: 0s}}\n"
)


def test_prints_records_and_tracebacks_are_kept_per_attempt_and_not_printed(
    make_client: Callable[..., Client], capsys: pytest.CaptureFixture[str]
) -> None:
    client = make_client()
    client.start()
    run_id = client.submit(CHATTY)
    assert client.wait(run_id, timeout=20).output == {"s": {"ok": 2}}
    wait_until(
        lambda: [x for x in client.list_step_logs(run_id) if x.attempt == 2],
        what="the second attempt's lines",
    )
    lines = client.list_step_logs(run_id)
    first = [(x.stream, x.level, x.message) for x in lines if x.attempt == 1]
    assert first[:4] == [
        ("stdout", None, "hello from print, attempt 1"),
        ("stderr", None, "line"),
        ("log", "WARNING", "chatty: a warning record"),
        ("log", "INFO", "cyclone_flow.step: ctx.log says hi"),
    ]
    assert first[4][:2] == ("log", "ERROR")
    assert first[4][2].startswith("chatty: logged with its traceback\nTraceback")
    assert "KeyError: 'caught'" in first[4][2]
    assert first[5] == ("stdout", None, "partial ")  # the partial line, flushed at the end
    assert first[6][:2] == ("log", "ERROR")
    assert first[6][2].startswith(
        "the handler raised ValueError: first attempt fails\nTraceback (most recent call last):"
    )
    assert first[6][2].endswith("ValueError: first attempt fails")
    second = [x.message for x in lines if x.attempt == 2]
    assert second[0] == "hello from print, attempt 2" and len(second) == 6  # no traceback
    assert [x.seq for x in lines if x.attempt == 1] == list(range(7))
    assert client.list_step_logs(run_id, attempt=2, node="s") == [
        x for x in lines if x.attempt == 2
    ]
    assert client.list_step_logs(run_id, after=lines[-2].id) == lines[-1:]
    # the tail is the last lines by when they were produced: a failed attempt's lines can
    # be stored after its retry's (the retry is claimed before they are written)
    assert client.list_step_log_tail(run_id, 2) == sorted(lines, key=lambda x: (x.at, x.id))[-2:]
    out = capsys.readouterr()
    assert "hello from print" not in out.out and "hello from print" not in out.err
    assert "partial" not in out.out


def test_the_cap_keeps_the_first_bytes_and_marks_the_cut(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(step_log_bytes=1000)
    client.start()
    run_id = client.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 50})
    client.wait(run_id, timeout=20)
    lines = wait_until(lambda: client.list_step_logs(run_id), what="the lines")
    assert [x.message[:4] for x in lines[:-2]] == [f"{i:04d}" for i in range(10)]
    # said where the cut began (stored while the attempt runs) and how much at its end
    assert (lines[-2].stream, lines[-2].level) == ("log", "WARNING")
    assert lines[-2].message == (
        "[cyclone-flow] this attempt's logs reached step_log_bytes = 1000: the lines after "
        "this one are cut"
    )
    assert (lines[-1].stream, lines[-1].level) == ("log", "WARNING")
    assert lines[-1].message == (
        "[cyclone-flow] 4000 more bytes of this attempt's logs were cut (step_log_bytes = 1000)"
    )


def test_a_fan_out_node_selects_its_items_and_a_client_without_capture_prints(
    make_client: Callable[..., Client], capfd: pytest.CaptureFixture[str]
) -> None:
    flow = load_flow_text(
        "name: fan\nnodes:\n  each:\n    type: fan_out\n    over: [{lines: 1}, {lines: 2}]\n"
        "    call: cyclone_test_handlers.chatty:loud\n"
    )
    client = make_client()
    client.start()
    run_id = client.submit(flow)
    client.wait(run_id, timeout=20)
    wait_until(lambda: len(client.list_step_logs(run_id, node="each")) == 3, what="3 lines")
    assert {x.node for x in client.list_step_logs(run_id, node="each")} == {"each[0]", "each[1]"}
    assert client.list_step_logs(run_id, node="each[1]")[1].message.startswith("0001")
    client.shutdown()
    off = make_client(step_log_bytes=0)
    off.start()
    other = off.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 1})
    off.wait(other, timeout=20)
    assert off.list_step_logs(other) == []
    assert "0000xxx" in capfd.readouterr().out


def test_the_proxies_are_removed_when_the_worker_stops(make_client: Callable[..., Client]) -> None:
    before = sys.stdout, sys.stderr
    client = make_client()
    client.start()
    assert isinstance(sys.stdout, ThreadStream) and isinstance(sys.stderr, ThreadStream)
    assert sys.stdout.uncaptured is before[0]
    client.shutdown()
    assert (sys.stdout, sys.stderr) == before


def test_logs_go_with_their_run(
    make_client: Callable[..., Client], db: psycopg.Connection[object]
) -> None:
    client = make_client()
    client.start()
    run_id = client.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 3})
    run = client.wait(run_id, timeout=20)
    wait_until(lambda: client.list_step_logs(run_id), what="the lines")
    assert run.finished_at is not None
    sweeper = RetentionSweeper(database(client), RetentionSweeperConfig(age_s=60))
    assert sweeper.run_once(now=run.finished_at + timedelta(seconds=61)).deleted == 1
    assert db.execute("SELECT count(*) FROM cyclone_step_logs").fetchone() == (0,)
    with pytest.raises(RunNotFoundError):
        client.list_step_logs(run_id)


def test_step_log_bytes_is_checked() -> None:
    from cyclone_flow.config import build_config

    assert build_config({"step_log_bytes": 0}).step_log_bytes == 0
    for bad in (-1, 1.5, True, 17 * 1024 * 1024):
        with pytest.raises(ConfigError, match="step_log_bytes"):
            build_config({"step_log_bytes": bad})


def test_a_handler_print_under_the_live_bar_goes_to_its_step_logs(
    make_client: Callable[..., Client], capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar of ``cyclone-flow run`` on a terminal, in its order: the worker starts,
    then the bar (rich's Live, which redirected sys.stdout over the worker's proxy, so a
    handler's print came out above the bar instead of in its logs); the handler prints
    once the bar is drawn."""
    client = make_client()
    key = f"bar-{uuid.uuid4()}"
    run_id = client.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 2, "key": key})
    client.start(run_id=run_id)
    out = io.StringIO()

    def release_under_the_bar() -> None:
        wait_until(lambda: "run " in out.getvalue(), what="the bar")
        event(key, "go").set()

    releaser = threading.Thread(target=release_under_the_bar)
    releaser.start()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    follow_run(client, run_id, console=console)
    releaser.join()
    lines = wait_until(lambda: client.list_step_logs(run_id), what="the lines")
    assert [x.message[:4] for x in lines] == ["0000", "0001"]
    assert "0000xxx" not in out.getvalue() + capsys.readouterr().out


def test_a_running_steps_lines_are_stored_while_it_runs_in_order(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    """A running step's lines are stored while it runs, in order, not only when its
    attempt ends."""
    client = make_client(step_log_flush_interval=0.1)
    client.start()
    release = tmp_path / "release"
    run_id = client.enqueue(
        "cyclone_test_handlers.chatty:log_then_wait", {"line": "early", "release": str(release)}
    )
    lines = wait_until(lambda: client.list_step_logs(run_id), what="the running step's lines")
    assert [x.message for x in lines] == ["early", "cyclone_flow.step: logged: early"]
    assert client.get_run(run_id).state == "running" and not release.exists()
    # the dashboard's step page reads the same table: the running step shows its line
    pytest.importorskip("starlette", reason="the ui extra is not installed")
    from starlette.testclient import TestClient

    from cyclone_flow.ui import create_app

    page = TestClient(create_app(client), base_url="http://localhost").get(
        f"/runs/{run_id}/steps/job"
    )
    assert page.status_code == 200 and "stdout: early" in page.text
    release.touch()
    client.wait(run_id, timeout=20)
    assert [x.seq for x in client.list_step_logs(run_id)] == [0, 1]  # stored once


def test_a_chatty_handler_is_stored_in_few_statements(
    make_client: Callable[..., Client], tmp_path: Path, db: psycopg.Connection[Any]
) -> None:
    """2,000 lines of one attempt: a few multi-row INSERTs (one transaction each: rows of
    one statement share their xmin), numbered in order across them."""
    client = make_client(step_log_flush_interval=0.05)
    client.start()
    release = tmp_path / "release"
    release.touch()
    run_id = client.enqueue(
        "cyclone_test_handlers.chatty:log_then_wait",
        {"line": "go", "many": 2000, "release": str(release)},
    )
    client.wait(run_id, timeout=20)
    # the last lines are written just after the completion (group commit: it may be seen first)
    lines = wait_until(
        lambda: len(client.list_step_logs(run_id)) >= 2002 and client.list_step_logs(run_id)
    )
    assert len(lines) == 2002 and [x.seq for x in lines] == list(range(2002))
    assert [x.message for x in lines[2:5]] == ["line 0", "line 1", "line 2"]
    (statements,) = db.execute(
        "SELECT count(DISTINCT xmin::text) FROM cyclone_step_logs WHERE run_id = %s",
        (run_id,),
    ).fetchone() or (0,)
    assert 1 <= statements <= 2002 // 500 + 2, statements  # FLUSH_LINES = 500


def test_the_flush_interval_is_validated(make_client: Callable[..., Client]) -> None:
    with pytest.raises(ConfigError, match="step_log_flush_interval must be above 0"):
        make_client(step_log_flush_interval=0)


def test_a_handler_that_logs_nothing_starts_no_flusher(make_client: Callable[..., Client]) -> None:
    """The no-op path: no statement and no thread (so no wakeups) for step logs."""
    client = make_client(step_log_flush_interval=0.05)
    client.start()
    run_id = client.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 0})
    client.wait(run_id, timeout=20)
    assert client.list_step_logs(run_id) == []
    assert "cyclone-step-logs" not in {t.name for t in threading.enumerate()}


def test_follow_prints_a_line_committed_after_a_higher_id(
    make_client: Callable[..., Client], db: psycopg.Connection[Any]
) -> None:
    """Two worker processes' flushes can commit out of id order: ``logs --follow`` must not
    skip the lower id that became visible after a higher one was printed (reading from the
    highest id printed, as before, skipped it)."""
    from cyclone_flow.cli.inspect_cmds import _LogReader

    client = make_client()
    run_id = client.enqueue("cyclone_test_handlers.chatty:loud", {"lines": 0})

    def insert(line_id: int) -> None:
        db.execute(
            "INSERT INTO cyclone_step_logs (id, run_id, node, attempt, generation, seq, at,"
            " stream, message) OVERRIDING SYSTEM VALUE"
            " VALUES (%s, %s, 'job', 1, 1, %s, now(), 'stdout', %s)",
            (line_id, run_id, line_id, f"line {line_id}"),
        )

    reader = _LogReader(client, run_id, None, None)
    insert(1_000_000)
    insert(1_000_002)
    assert [x.id for x in reader.new_lines()] == [1_000_000, 1_000_002]
    insert(1_000_001)  # committed late: its id was taken before 1_000_002's
    assert [x.id for x in reader.new_lines()] == [1_000_001]
    assert reader.new_lines() == []
