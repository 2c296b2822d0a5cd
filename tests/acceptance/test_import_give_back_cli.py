"""A worker that cannot import a step's call, or may not run it, gives the step back
instead of failing the run (docs/failures.md), through the real script: the
step goes back to available with no attempt charged and the worker's reason on it, which
``status`` (text, ``--json``) and ``status --watch`` show; a worker that can import it
runs it (a rolling deploy); once the node's ``import_wait`` passes since the first
give-back the step is discarded with ``import_error``; ``worker --reload`` with a syntax
error saved fails no run and claims again once the file is fixed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from helpers.cli import Runner, clean_env, json_output, no_traceback
from helpers.paths import CLI
from helpers.procs import WorkerProcess, wait_until
from helpers.pty_cli import PtyProcess, screen

HANDLER = "def charge(ctx, input):\n    return {'charged': input}\n"


def _project(tmp_path: Path, import_wait: str | None = None) -> tuple[Path, Path]:
    """``tmp_path/src/shopgb/handlers.py`` and a flow calling it in ``tmp_path/work``:
    ``(src, flow file)``."""
    pkg = tmp_path / "src" / "shopgb"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "handlers.py").write_text(HANDLER)
    work = tmp_path / "work"
    work.mkdir()
    bound = f"import_wait: {import_wait}\n" if import_wait else ""
    flow = work / "flow.yaml"
    flow.write_text(f"name: shop\n{bound}nodes:\n  a: {{call: 'shopgb.handlers:charge'}}\n")
    return tmp_path / "src", flow


def _submit(cli: Runner, flow: Path) -> str:
    proc = cli("submit", flow, "--input", '{"n": 1}')
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _step(db: Any, run_id: str) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT state, attempt, reclaims, error_kind, errors, import_wait_reason,"
        " import_wait_since FROM cyclone_steps WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _given_back(db: Any, run_id: str) -> tuple[Any, ...]:
    """The step once given back and available again."""
    return wait_until(
        lambda: (row := _step(db, run_id))[5] is not None and row[0] == "available" and row,
        timeout=30,
        what="the step given back",
    )


def _worker(database_url: str, schema: str, log: Path, *args: str, allow: str = "shopgb") -> Any:
    return WorkerProcess(
        database_url,
        schema,
        log,
        allow=[allow],
        extra_args=["--poll-interval", "20ms,200ms", *args],
    )


def test_a_worker_that_cannot_import_gives_back_and_another_runs_it(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    src, flow = _project(tmp_path)
    run_id = _submit(cli, flow)
    old = _worker(database_url, schema, tmp_path / "w1.log", "--client-id", "w1")
    try:
        state, attempt, reclaims, kind, errors, reason, since = _given_back(db, run_id)
        assert (attempt, reclaims, kind, errors) == (1, 0, None, []), reason
        assert since is not None
        assert reason.startswith("no live worker can import shopgb.handlers:charge: worker w1: ")
        assert "ModuleNotFoundError" in reason and "--import-path" in reason, reason
        # the run waits, and says why
        text = cli("status", run_id)
        no_traceback(text)
        assert text.returncode == 0, text.stderr
        line = next(x for x in text.stdout.splitlines() if x.startswith("waiting: a: "))
        assert "no live worker can import shopgb.handlers:charge: worker w1" in line, line
        assert "ModuleNotFoundError" in line and "import_wait" in line, line
        shown = json_output(cli("status", run_id, "--json").stdout)
        assert shown["state"] == "running"
        (step,) = shown["steps"]
        assert step["waiting"]["reason"] == "cannot_import", step
        assert "worker w1" in step["waiting"]["text"] and step["waiting"]["since"]
        watch = PtyProcess(
            "status", run_id, "--watch", "--database-url", database_url, "--schema", schema
        )
        try:
            watch.wait_for("no live worker can import", timeout=30)
            assert any("waiting: no live worker can import" in x for x in screen(watch.raw))
        finally:
            watch.kill()
        # a rolling deploy: a worker of the new code (it can import) runs it, not charged
        new = cli(
            "worker",
            "--exit-when-idle",
            "--allow-module",
            "shopgb",
            "--import-path",
            src,
            "--client-id",
            "w2",
            "--poll-interval",
            "20ms,200ms",
        )
        assert new.returncode == 0, new.stderr
    finally:
        old.terminate()
    assert "given back (no attempt charged)" in old.log(), old.log()
    state, attempt, reclaims, kind, errors, reason, since = _step(db, run_id)
    assert (state, attempt, reclaims, errors) == ("completed", 1, 0, []), (kind, reason)
    output = json_output(cli("status", run_id, "--json").stdout)["output"]
    assert output == {"a": {"charged": {"n": 1}}}


def test_a_call_outside_allow_module_is_given_back_not_failed(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    _, flow = _project(tmp_path)
    run_id = _submit(cli, flow)
    worker = _worker(
        database_url, schema, tmp_path / "w.log", "--client-id", "w9", allow="other_pkg"
    )
    try:
        _, attempt, _, kind, errors, reason, _ = _given_back(db, run_id)
    finally:
        worker.terminate()
    assert (attempt, kind, errors) == (1, None, []), reason
    assert reason.startswith("no live worker may run shopgb.handlers:charge: worker w9: "), reason
    assert "is not allowed on this worker" in reason, reason
    state = db.execute("SELECT state FROM cyclone_runs WHERE id = %s", (run_id,)).fetchone()
    assert state == ("running",)
    # that worker stopped: the waiting line says how to start one that may run it
    text = cli("status", run_id, cwd=tmp_path, env=clean_env(PATH="/usr/bin:/bin"))
    line = next(x for x in text.stdout.splitlines() if x.startswith("waiting: a: "))
    assert "no live worker may run shopgb.handlers:charge" in line, line
    assert line.endswith(
        "; no live worker serves queue 'default' (start one: "
        f"{CLI} worker --queue default --allow-module shopgb --import-path src)"
    ), line


def test_after_import_wait_the_step_is_discarded_with_import_error(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    _, flow = _project(tmp_path, import_wait="2s")
    run_id = _submit(cli, flow)
    watch = subprocess.Popen(
        [
            str(CLI),
            "status",
            run_id,
            "--watch",
            "--interval",
            "50ms",
            "--database-url",
            database_url,
            "--schema",
            schema,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    worker = _worker(database_url, schema, tmp_path / "w.log", "--client-id", "w1")
    try:
        out, err = watch.communicate(timeout=60)
    finally:
        watch.kill()
        worker.terminate()
    assert watch.returncode == 1, (out, err)  # the run failed
    state, attempt, _, kind, errors, _, _ = _step(db, run_id)
    assert (state, attempt, kind) == ("discarded", 1, "import_error")
    assert len(errors) == 1 and "import_wait passed" in errors[0]["error"], errors
    assert "no live worker can import shopgb.handlers:charge" in errors[0]["error"]
    assert "step a discarded: no live worker can import" in out, out
    run = db.execute("SELECT state, error_kind FROM cyclone_runs WHERE id = %s", (run_id,))
    assert run.fetchone()[0] == "failed"


def test_reload_with_a_syntax_error_fails_no_run_and_claims_once_fixed(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    src, flow = _project(tmp_path)
    handlers = src / "shopgb" / "handlers.py"
    handlers.write_text("def charge(ctx, input)\n    return 1\n")  # saved mid-edit
    run_id = _submit(cli, flow)
    worker = _worker(
        database_url,
        schema,
        tmp_path / "w.log",
        "--reload",
        "--import-path",
        str(src),
        "--client-id",
        "w1",
    )
    try:
        _, attempt, _, kind, errors, reason, _ = _given_back(db, run_id)
        assert (attempt, kind, errors) == (1, None, []), reason
        assert "SyntaxError" in reason, reason
        handlers.write_text(HANDLER)  # fixed: the supervisor restarts the worker
        wait_until(
            lambda: _step(db, run_id)[0] == "completed",
            timeout=60,
            what="the step run after the fix",
        )
    finally:
        worker.terminate()
    state, attempt, reclaims, _, errors, _, _ = _step(db, run_id)
    assert (state, attempt, reclaims, errors) == ("completed", 1, 0, [])


def _exiting_project(tmp_path: Path) -> tuple[Path, Path]:
    """``shopgb/sx.py`` calls ``sys.exit(0)`` at import (a script turned into a module):
    ``(src, flow file)``."""
    src, _ = _project(tmp_path)
    (src / "shopgb" / "sx.py").write_text(
        "import sys\nsys.exit(0)\ndef fn(ctx, input):\n    return 1\n"
    )
    flow = tmp_path / "work" / "sx.yaml"
    flow.write_text("name: sx\nnodes:\n  a: {call: 'shopgb.sx:fn'}\n")
    return src, flow


def test_run_fails_a_handler_module_that_exits_at_import_at_once(
    cli: Runner, db: Any, tmp_path: Path
) -> None:
    """SystemExit while importing is an import failure: ``run`` fails the step with
    import_error, it does not leave the step to its lease for ever."""
    src, flow = _exiting_project(tmp_path)
    ran = cli("run", flow, "--import-path", src, "--lease-ttl", "1s", timeout=60)
    no_traceback(ran)
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert "cannot import module 'shopgb.sx': SystemExit: 0" in ran.stderr, ran.stderr
    assert "could not record the result" not in ran.stderr, ran.stderr
    row = db.execute("SELECT state, attempt, error_kind FROM cyclone_steps").fetchone()
    assert tuple(row) == ("discarded", 1, "import_error")


def test_a_worker_gives_back_a_handler_module_that_exits_at_import(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    src, flow = _exiting_project(tmp_path)
    run_id = _submit(cli, flow)
    worker = _worker(
        database_url, schema, tmp_path / "w.log", "--import-path", str(src), "--client-id", "w1"
    )
    try:
        _, attempt, reclaims, kind, errors, reason, _ = _given_back(db, run_id)
    finally:
        worker.terminate()
    assert (attempt, reclaims, kind, errors) == (1, 0, None, []), reason
    assert "cannot import module 'shopgb.sx': SystemExit: 0" in reason, reason
    assert "could not record the result" not in worker.log(), worker.log()


def test_exit_when_idle_exits_leaving_the_steps_it_cannot_import(
    cli: Runner, db: Any, database_url: str, schema: str, tmp_path: Path
) -> None:
    """``worker --exit-when-idle`` runs what it can, then exits 0 although a step of a call
    it cannot import is still available (rather than giving it back every 1-8 s until
    the node's import_wait), saying which call it left and why."""
    _, flow = _project(tmp_path)  # shopgb is on no --import-path of this worker
    stuck = _submit(cli, flow)
    other = tmp_path / "work" / "other.yaml"
    other.write_text("name: other\nnodes:\n  b: {call: 'cyclone_test_handlers.queueing:noop'}\n")
    done = _submit(cli, other)
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "w.log",
        allow=["shopgb", "cyclone_test_handlers"],
        extra_args=["--poll-interval", "20ms,200ms", "--exit-when-idle", "--client-id", "w1"],
    )
    try:
        code = worker.proc.wait(timeout=60)
    finally:
        worker.terminate()
    log = worker.log()
    assert code == 0, log
    assert _step(db, done)[0] == "completed", log
    state, attempt, _, kind, errors, reason, _ = _step(db, stuck)
    assert (state, attempt, kind, errors) == ("available", 1, None, []), reason
    assert "idle: leaving the steps of shopgb.handlers:charge to other workers: " in log, log
    assert "no live worker can import shopgb.handlers:charge: worker w1" in log, log
