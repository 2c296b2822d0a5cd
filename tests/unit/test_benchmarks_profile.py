"""The profiler's parsers (benchmarks/profile.py): the Postgres statement log and py-spy's
collapsed stacks, on small inputs written here."""

from __future__ import annotations

from pathlib import Path

from benchmarks.profile import parse_log, parse_pyspy

RUN_INPUT = 'SELECT input::text FROM "s1".cyclone_runs WHERE id = $1'
OUTPUT_GET = 'SELECT output::text, state FROM "s1".cyclone_steps WHERE run_id = $1 AND node = $2'


def _entry(pid: int, ms: float, what: str) -> str:
    return f"2026-01-01 10:00:00.001 UTC [{pid}] LOG:  duration: {ms:.3f} ms  {what}"


LOG = "\n".join(
    [
        _entry(11, 0.02, "statement: BEGIN"),
        _entry(11, 0.01, f"parse <unnamed>: {RUN_INPUT}"),
        _entry(11, 0.01, f"bind <unnamed>: {RUN_INPUT}"),
        _entry(11, 0.10, f"execute <unnamed>: {RUN_INPUT}"),
        _entry(12, 0.03, "statement: BEGIN"),
        _entry(12, 0.20, f"execute _pg3_1: {OUTPUT_GET}"),
        _entry(11, 0.05, "statement: COMMIT"),
        _entry(12, 4.00, "statement: COMMIT"),
    ]
)


def test_statement_log_counts_round_trips_and_names_commits_by_transaction() -> None:
    trips, server_ms = parse_log(LOG, "s1")
    assert trips == {
        "BEGIN": 2,
        "run_get_input": 1,
        "step_get_output": 1,
        "COMMIT (run_get_input)": 1,
        "COMMIT (step_get_output)": 1,
    }
    assert abs(server_ms["run_get_input"] - 0.120) < 1e-9  # parse + bind + execute
    assert server_ms["COMMIT (step_get_output)"] == 4.0


def test_pyspy_stacks_by_thread_role_function_and_leaf_module(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "Thread._bootstrap (threading.py:1);Worker._work_loop (cyclone_flow/worker/runtime.py:"
        "1);Executor.execute (cyclone_flow/worker/executor.py:2);Publisher.publish (cyclone_flow/"
        "notify.py:3);Connection.execute (site-packages/psycopg/connection.py:4) 3\n"
        "Thread._bootstrap (threading.py:1);Worker._claim_loop (cyclone_flow/worker/runtime.py"
        ":5);claim (cyclone_flow/engine/claim.py:6) 1\n"
        "<module> (x.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 2\n"
    )
    roles, inclusive, leaf, total = parse_pyspy(raw)
    assert total == 6
    assert roles == {
        "worker threads": 3,
        "claim loop": 1,
        "startup imports (not per step)": 2,
    }
    assert inclusive["Executor.execute"] == 3 and inclusive["Publisher.publish"] == 3
    assert inclusive["claim"] == 1 and inclusive["Connection.execute"] == 3
    assert leaf["psycopg/connection"] == 3
