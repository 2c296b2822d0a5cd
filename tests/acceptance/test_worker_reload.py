"""``cyclone-flow worker --reload`` through the real CLI: a handler file edited
while the worker runs is picked up by the next run (the worker restarts gracefully in a
new child process), a function added to it resolves, and SIGTERM stops the supervisor
and its worker cleanly."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

from helpers.cli import Runner, clean_env, json_output
from helpers.paths import CLI
from helpers.procs import wait_until

HANDLERS_V1 = "def greet(ctx, input):\n    return {'version': 1}\n"
HANDLERS_V2 = (
    "def greet(ctx, input):\n    return {'version': 2}\n\n"
    "def gate(ctx, input):\n    return {'gate': True}\n"
)


def _flow(folder: Path, name: str, call: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f'name: {name}\nnodes:\n  a: {{call: "{call}"}}\n', encoding="utf-8")
    return path


def _live(cli: Runner) -> list[dict[str, Any]]:
    return [w for w in json_output(cli("workers", "--json").stdout) if w["live"]]


def test_an_edited_handler_runs_in_the_next_run(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    module = project / "reload_handlers.py"
    module.write_text(HANDLERS_V1, encoding="utf-8")
    greet = _flow(tmp_path, "greet", "reload_handlers:greet")
    gate = _flow(tmp_path, "gate", "reload_handlers:gate")
    log = (tmp_path / "worker.log").open("ab")
    proc = subprocess.Popen(
        [str(CLI), "worker", "--reload", "--allow-module", "reload_handlers",
         "--lease-ttl", "1s", "--poll-interval", "20ms,100ms", "--shutdown-timeout", "2s",
         "--database-url", database_url, "--schema", schema],
        cwd=project, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        (first,) = wait_until(lambda: _live(cli), timeout=30, what="the first worker")
        assert first["pid"] != proc.pid  # the worker is the supervisor's child
        done = cli("submit", greet, "--wait", "--json", "--timeout", "60s")
        assert json_output(done.stdout)["output"] == {"a": {"version": 1}}, done.stderr
        module.write_text(HANDLERS_V2, encoding="utf-8")
        (second,) = wait_until(
            lambda: [w for w in _live(cli) if w["client_id"] != first["client_id"]],
            timeout=60,
            what="a restarted worker",
        )
        assert second["pid"] not in (first["pid"], proc.pid)
        done = cli("submit", greet, "--wait", "--json", "--timeout", "60s")
        assert json_output(done.stdout)["output"] == {"a": {"version": 2}}, done.stderr
        done = cli("submit", gate, "--wait", "--json", "--timeout", "60s")
        assert json_output(done.stdout)["output"] == {"a": {"gate": True}}, done.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        log.close()
    assert code == 0, (tmp_path / "worker.log").read_text()
    assert _live(cli) == []  # the child shut down cleanly (its row deleted)
    text = (tmp_path / "worker.log").read_text()
    assert "reload_handlers.py changed; restarting the worker" in text


def test_it_watches_only_the_allowed_packages_and_logs_the_changed_path(
    cli: Runner, database_url: str, schema: str, tmp_path: Path
) -> None:
    # a .py file of the current folder outside the allowed package (a script,
    # a test) restarts nothing; a file of the package does, and its path is logged
    project = tmp_path / "project"
    package = project / "watched_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    handlers = package / "handlers.py"
    handlers.write_text(HANDLERS_V1, encoding="utf-8")
    script = project / "scratch_script.py"
    script.write_text("print(1)\n", encoding="utf-8")
    log_path = tmp_path / "worker.log"
    log = log_path.open("ab")
    proc = subprocess.Popen(
        [str(CLI), "worker", "--reload", "--allow-module", "watched_pkg",
         "--lease-ttl", "1s", "--poll-interval", "20ms,100ms", "--shutdown-timeout", "2s",
         "--database-url", database_url, "--schema", schema],
        cwd=project, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        (first,) = wait_until(lambda: _live(cli), timeout=30, what="the first worker")
        script.write_text("print(2)\n", encoding="utf-8")  # not watched
        handlers.write_text(HANDLERS_V2, encoding="utf-8")
        wait_until(
            lambda: [w for w in _live(cli) if w["client_id"] != first["client_id"]],
            timeout=60,
            what="a restarted worker",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        log.close()
    text = log_path.read_text()
    assert code == 0, text
    watching = next(line for line in text.splitlines() if "reload: watching" in line)
    assert watching.endswith("reload: watching .py files under watched_pkg"), watching
    changed = [line for line in text.splitlines() if "changed; restarting" in line]
    assert changed and all("scratch_script" not in line for line in changed), changed
    assert f"{Path('watched_pkg') / 'handlers.py'} changed; restarting the worker" in changed[0]
