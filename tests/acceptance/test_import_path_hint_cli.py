"""A handler module that no folder on sys.path holds: ``lint
--check-imports``, ``run`` and ``worker`` say to pass ``--import-path DIR`` (or set
PYTHONPATH); a module that is found but fails on an import of its own gets no such hint.
The real script in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import Runner, no_traceback, run_cli

HINT = "pass --import-path DIR, the folder that contains hintpkg, or set PYTHONPATH=DIR"


def _package(tmp_path: Path) -> Path:
    """``tmp_path/src/hintpkg`` (a handler, and a module whose import fails inside), and a
    flow calling it, in ``tmp_path/work`` (a folder that does not hold the package)."""
    pkg = tmp_path / "src" / "hintpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "steps.py").write_text("def hello(ctx, input):\n    return 'hello'\n")
    (pkg / "broken.py").write_text("import no_such_dependency_w18\n")
    work = tmp_path / "work"
    work.mkdir()
    # import_wait 1s: a worker that cannot import it gives it back that long
    (work / "flow.yaml").write_text(
        "name: hinted\nimport_wait: 1s\nnodes:\n  a: {call: 'hintpkg.steps:hello'}\n"
    )
    (work / "broken.yaml").write_text("name: broken\nnodes:\n  a: {call: 'hintpkg.broken:f'}\n")
    return work


def test_lint_check_imports_hints_at_import_path(tmp_path: Path) -> None:
    work = _package(tmp_path)
    proc = run_cli("lint", "--check-imports", "flow.yaml", cwd=work)
    no_traceback(proc)
    assert proc.returncode == 1
    assert "error[E020]" in proc.stdout and HINT in proc.stdout, proc.stdout
    fixed = run_cli("lint", "--check-imports", "--import-path", "../src", "flow.yaml", cwd=work)
    assert fixed.returncode == 0, fixed.stdout
    # found, but its own import fails: the hint would mislead
    broken = run_cli("lint", "--check-imports", "--import-path", "../src", "broken.yaml", cwd=work)
    assert broken.returncode == 1 and "no_such_dependency_w18" in broken.stdout, broken.stdout
    assert "--import-path" not in broken.stdout


def test_run_and_worker_hint_at_import_path(cli: Runner, tmp_path: Path) -> None:
    work = _package(tmp_path)
    ran = cli("run", "flow.yaml", cwd=work)
    no_traceback(ran)
    assert ran.returncode == 1, ran.stderr
    assert "cannot import module 'hintpkg.steps'" in ran.stderr and HINT in ran.stderr, ran.stderr

    submitted = cli("submit", "flow.yaml", cwd=work)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    worker = cli(
        "worker",
        "--exit-when-idle",
        "--allow-module",
        "hintpkg",
        "--poll-interval",
        "20ms,200ms",
        cwd=work,
    )
    assert worker.returncode == 0, worker.stderr
    assert HINT in worker.stderr, worker.stderr  # the worker's log line of the failure
    # it gave the step back and exited when only that was left: the
    # waiting reason carries the hint
    status = json.loads(cli("status", run_id, "--json").stdout)
    (step,) = status["steps"]
    assert step["state"] == "available", step
    assert step["waiting"]["reason"] == "cannot_import" and HINT in step["waiting"]["text"], step
