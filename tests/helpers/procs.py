"""Real ``cyclone-flow worker`` processes on the test's schema, and polling until a
condition holds (no fixed sleeps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from helpers.paths import CLI, REPO, TEST_HANDLERS

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value; fail the
    test with ``what`` when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what or predicate}")
        time.sleep(interval)


def env_without_cyclone(**extra: str) -> dict[str, str]:
    """The current environment without any ``CYCLONE_*`` setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CYCLONE_")}
    env.update(extra)
    return env


class WorkerProcess:
    """A real ``cyclone-flow worker`` process on the test's schema (stdout and stderr
    appended to ``log_path``), the test handlers importable and allowed."""

    def __init__(
        self,
        database_url: str,
        schema: str,
        log_path: Path,
        *,
        workers: int = 1,
        lease_ttl: str = "1s",
        allow: Sequence[str] = ("cyclone_test_handlers",),
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        args = [
            str(CLI),
            "worker",
            "--workers",
            str(workers),
            "--lease-ttl",
            lease_ttl,
            "--import-path",
            str(TEST_HANDLERS),
            "--database-url",
            database_url,
            "--schema",
            schema,
        ]
        for module in allow:
            args += ["--allow-module", module]
        args += list(extra_args)
        self._start(args, log_path, env_without_cyclone(**(env or {})))

    def _start(self, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.wait()

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM (graceful shutdown) and reap; SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.wait()

    def wait(self) -> int:
        code = self.proc.wait()
        if not self._log.closed:
            self._log.close()
        return code

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


class ModuleWorkerProcess(WorkerProcess):
    """A worker process running ``python -m MODULE`` (e.g. one that builds its own
    ``Client`` with hooks, which ``cyclone-flow worker`` cannot take), with the test
    handlers importable and ``env`` added to a clean environment."""

    def __init__(self, module: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        pythonpath = os.pathsep.join(
            p for p in (str(TEST_HANDLERS), os.environ.get("PYTHONPATH", "")) if p
        )
        self._start(
            [sys.executable, "-m", module],
            log_path,
            env_without_cyclone(**{"PYTHONPATH": pythonpath, **(env or {})}),
        )
