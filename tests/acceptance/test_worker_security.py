"""Worker security from the real command line: `cyclone-flow worker --allow-module` runs
no code of a module outside its allow-list, whatever attribute path a step names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cyclone_test_handlers.bypass import write_bypass_packages
from helpers.cli import Runner, json_output, no_traceback

from cyclone_flow import Client

BYPASSES = (
    "do.__call__",  # a foreign function's method-wrapper
    "Evil",  # a foreign class
    "caller",  # a callable instance of a foreign class
    "send",  # a bound method of a foreign object
    "evil_partial",  # a functools.partial of a foreign function
    "fn.__globals__.__setitem__",  # writes into the allowed module's globals
    # code inherited, run while walking, or behind a decorator
    "inst_call",  # an allowed class inheriting a foreign __call__
    "SubInit",  # ... a foreign __init__
    "WithMeta",  # ... a foreign metaclass
    "partial_sub",  # an allowed subclass of functools.partial
    "ga.anything",  # a foreign __getattr__, asked while walking
    "Holder.d",  # a foreign descriptor's __get__, run while walking
    "evil_decorated",  # a foreign functools.wraps decorator
)


def test_worker_discards_steps_that_reach_foreign_code(
    cli: Runner, make_client: Callable[..., Client], db: Any, tmp_path: Path
) -> None:
    packages = write_bypass_packages(tmp_path)
    # the jobs through the API (the subject is the worker's command line, not enqueue's:
    # 14 enqueue and status processes took most of this test's time)
    client = make_client()
    runs = {
        path: client.enqueue(f"{packages.allowed}.mod:{path}", {"n": 1})
        for path in (*BYPASSES, "ok")
    }
    worker = cli(
        "worker",
        "--exit-when-idle",
        "--allow-module",
        packages.allowed,
        "--import-path",
        tmp_path,
        "--poll-interval",
        "20ms,200ms",
    )
    no_traceback(worker)
    assert worker.returncode == 0, worker.stderr
    assert not packages.marker.exists(), f"foreign code ran: {packages.marker.read_text()}"
    # one status through the command line; the rest read from the database
    shown = json_output(cli("status", runs["ok"], "--json").stdout)
    assert shown["state"] == "completed" and shown["output"] == {"job": {"ok": {"n": 1}}}
    for path, run_id in runs.items():
        state, output = db.execute(
            "SELECT state, output FROM cyclone_runs WHERE id = %s", (run_id,)
        ).fetchone()
        (step,) = db.execute(
            "SELECT state, error_kind, error FROM cyclone_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
        if path == "ok":
            assert state == "completed" and output == {"job": {"ok": {"n": 1}}}
            continue
        assert state == "failed", (path, state, step)
        assert step[:2] == ("discarded", "import_error"), path
        assert "not allowed on this worker" in step[2] or "'_'" in step[2], step
