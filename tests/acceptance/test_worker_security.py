"""Worker security from the real command line: `cyclone-flow worker --allow-module` runs
no code of a module outside its allow-list, whatever attribute path a step names."""

from __future__ import annotations

import json
from pathlib import Path

from cyclone_test_handlers.bypass import write_bypass_packages
from helpers.cli import Runner, no_traceback

BYPASSES = (
    "do.__call__",  # a foreign function's method-wrapper
    "Evil",  # a foreign class
    "caller",  # a callable instance of a foreign class
    "send",  # a bound method of a foreign object
    "evil_partial",  # a functools.partial of a foreign function
    "fn.__globals__.__setitem__",  # writes into the allowed module's globals
    # issue 13, second round
    "inst_call",  # an allowed class inheriting a foreign __call__
    "SubInit",  # ... a foreign __init__
    "WithMeta",  # ... a foreign metaclass
    "partial_sub",  # an allowed subclass of functools.partial
    "ga.anything",  # a foreign __getattr__, asked while walking
    "Holder.d",  # a foreign descriptor's __get__, run while walking
    "evil_decorated",  # a foreign functools.wraps decorator
)


def test_worker_discards_steps_that_reach_foreign_code(cli: Runner, tmp_path: Path) -> None:
    packages = write_bypass_packages(tmp_path)
    runs = {}
    for path in (*BYPASSES, "ok"):
        proc = cli("enqueue", f"{packages.allowed}.mod:{path}", "--args", '{"n": 1}')
        assert proc.returncode == 0, proc.stderr
        runs[path] = proc.stdout.strip()
    worker = cli(
        "worker",
        "--exit-when-idle",
        "--allow-module",
        packages.allowed,
        "--import-path",
        tmp_path,
    )
    no_traceback(worker)
    assert worker.returncode == 0, worker.stderr
    assert not packages.marker.exists(), f"foreign code ran: {packages.marker.read_text()}"
    for path, run_id in runs.items():
        status = json.loads(cli("status", run_id, "--json").stdout)
        (step,) = status["steps"]
        if path == "ok":
            assert status["state"] == "completed" and status["output"] == {"job": {"ok": {"n": 1}}}
            continue
        assert status["state"] == "failed", (path, status)
        assert (step["state"], step["error_kind"]) == ("discarded", "import_error"), path
        assert "not allowed on this worker" in step["error"] or "'_'" in step["error"], step
