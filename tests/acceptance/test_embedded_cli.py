"""``cyclone-flow embedded status|url|stop`` and the stderr line of a command that creates
a new embedded database, through the real console script with no ``--database-url`` (each
test here starts embedded servers of its own: keep them few). A ``kill -9``'d command
leaves its server running: ``embedded stop`` stops it, and the next command that joins
and exits normally stops it too (the killed pid no longer counts as a user)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.cli import clean_env, json_output, no_traceback, run_cli
from helpers.paths import CLI
from helpers.procs import wait_until


def _status(folder: Path) -> dict[str, Any]:
    proc = run_cli("embedded", "status", "--json", cwd=folder, env=clean_env(), timeout=60)
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    return dict(json_output(proc.stdout))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class _Worker:
    """A ``cyclone-flow worker`` on the embedded database of ``folder``."""

    def __init__(self, folder: Path, log: Path) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [str(CLI), "worker", "--allow-module", "nothing_here"],
            cwd=folder,
            env=clean_env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()


@pytest.mark.db  # starts embedded servers itself
def test_embedded_status_url_stop_and_the_new_database_line(tmp_path: Path) -> None:
    project = tmp_path / "project"
    sub = project / "sub"
    sub.mkdir(parents=True)
    home = project / ".cyclone"
    env = clean_env()
    workers: list[_Worker] = []
    try:
        # nothing there: the embedded commands say so and create nothing
        info = _status(project)
        assert (info["exists"], info["running"], info["pid"], info["url"]) == (
            False, False, None, None,
        )  # fmt: skip
        assert info["data_dir"] == str(home / "pgdata")
        url = run_cli("embedded", "url", cwd=project, env=env)
        no_traceback(url)
        assert url.returncode == 1
        assert url.stderr == f"error: no embedded Postgres runs in {home / 'pgdata'}\n"
        stop = run_cli("embedded", "stop", cwd=project, env=env)
        assert (stop.returncode, stop.stdout) == (
            0,
            f"no embedded Postgres runs in {home / 'pgdata'}\n",
        )
        assert not home.exists()
        # a command that needs runs says there are none here, and creates nothing either
        runs = run_cli("runs", cwd=project, env=env)
        no_traceback(runs)
        assert runs.returncode == 1
        assert f"error: no embedded Postgres in {home}, so there are no runs here" in runs.stderr
        assert "created" not in runs.stderr
        assert not home.exists()

        # the first command creates the database and says so; the next one does not
        first = run_cli("migrate", cwd=project, env=env, timeout=240)
        no_traceback(first)
        assert first.returncode == 0, first.stderr
        assert f"created a new, empty embedded Postgres in {home}" in first.stderr
        assert "; to use " in first.stderr  # another one (or a parent folder's)
        again = run_cli("migrate", cwd=project, env=env, timeout=240)
        assert again.returncode == 0, again.stderr
        assert f"using the embedded Postgres in {home}" in again.stderr
        assert "created" not in again.stderr
        info = _status(project)
        assert (info["exists"], info["running"]) == (True, False)  # stopped when it exited

        # from a subfolder: a new, empty database, and the line says how to use the old one
        nested = run_cli("migrate", cwd=sub, env=env, timeout=240)
        assert nested.returncode == 0, nested.stderr
        assert f"created a new, empty embedded Postgres in {sub / '.cyclone'}" in nested.stderr
        assert f"to use the one in {home}, run from {project} or set CYCLONE_HOME={home}" in (
            nested.stderr
        )
        deeper = sub / "deeper"
        deeper.mkdir()
        lost = run_cli("status", "abc", cwd=deeper, env=env)
        no_traceback(lost)
        assert lost.returncode == 1
        assert f"no embedded Postgres in {deeper / '.cyclone'}" in lost.stderr
        assert f"to use the one in {sub / '.cyclone'}, run from {sub}" in lost.stderr
        assert not (deeper / ".cyclone").exists()

        # a running worker uses the server: status shows it, stop refuses
        worker = _Worker(project, tmp_path / "worker.log")
        workers.append(worker)
        info = wait_until(
            lambda: (i := _status(project))["running"] and worker.proc.pid in i["users"] and i,
            timeout=120,
            what="the worker on the embedded server",
        )
        server_pid = info["pid"]
        assert _alive(server_pid)
        refused = run_cli("embedded", "stop", cwd=project, env=env)
        no_traceback(refused)
        assert refused.returncode == 1
        assert f"in use by cyclone-flow process(es) {worker.proc.pid}" in refused.stderr
        assert _status(project)["running"]

        # kill -9: the server stays up, its user is gone
        worker.kill()
        info = _status(project)
        assert (info["running"], info["pid"], info["users"]) == (True, server_pid, [])
        assert worker.proc.pid in info["stale_users"]
        text = run_cli("embedded", "status", cwd=project, env=env)
        assert f"server: running, pid {server_pid}" in text.stdout
        assert f"gone users: pid {worker.proc.pid}" in text.stdout
        url = run_cli("embedded", "url", cwd=project, env=env)
        assert url.returncode == 0, url.stderr
        with psycopg.connect(url.stdout.strip()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)

        stopped = run_cli("embedded", "stop", cwd=project, env=env, timeout=120)
        no_traceback(stopped)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == (
            f"stopped the embedded Postgres in {home / 'pgdata'} (pid {server_pid})\n"
        )
        info = _status(project)
        assert (info["running"], info["stale_users"]) == (False, [])
        wait_until(lambda: not _alive(server_pid), timeout=30, what="the postmaster to exit")

        # after another kill -9, the next command that exits normally stops the server
        worker = _Worker(project, tmp_path / "worker2.log")
        workers.append(worker)
        wait_until(
            lambda: worker.proc.pid in _status(project)["users"],
            timeout=120,
            what="the second worker on the embedded server",
        )
        worker.kill()
        assert _status(project)["running"]
        runs = run_cli("runs", cwd=project, env=env, timeout=240)
        assert runs.returncode == 0, runs.stderr
        assert _status(project)["running"] is False
    finally:
        for worker in workers:
            worker.kill()
        for folder in (project, sub):
            run_cli("embedded", "stop", "--force", cwd=folder, env=env, timeout=120)
