"""The ``worker --processes`` supervisor (``cyclone_flow.cli.processes.run_processes``)
on real child processes that are not workers (``python -c ...``): a crashing child is
restarted with a doubling backoff, capped at ``BACKOFF_MAX_S`` and reset once it ran for
``STABLE_S``; a child exiting 0 is not restarted; one exiting 2 stops the others and the
supervisor; a stop forwards the signal. Each test stops the supervisor from a thread once
the log shows what it waits for (no fixed sleeps)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cyclone_flow.cli import processes
from cyclone_flow.cli.processes import describe_exit, run_processes


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in list(caplog.records) if r.name == "cyclone_flow"]


class _StopWhen:
    """A stop event that a thread sets once ``done(messages)`` holds (``seen`` True) or
    after ``timeout`` seconds; :meth:`close` (after the supervisor returned) ends the
    thread. ``fired``: whether the thread set the event (not the supervisor ending)."""

    def __init__(
        self,
        caplog: pytest.LogCaptureFixture,
        done: Callable[[list[str]], bool],
        timeout: float = 60.0,
    ) -> None:
        self.stop = threading.Event()
        self.seen = False
        self.fired = False
        self._closed = threading.Event()
        self._caplog, self._done, self._timeout = caplog, done, timeout
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        deadline = time.monotonic() + self._timeout
        while not self._closed.is_set():
            if self._done(_messages(self._caplog)):
                self.seen = True
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        if not self._closed.is_set():
            self.fired = True
            self.stop.set()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)


@pytest.fixture(autouse=True)
def _info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cyclone_flow")


def test_a_crashing_child_is_restarted_with_a_doubling_delay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crash = _python("import sys; sys.exit(3)")
    watch = _StopWhen(caplog, lambda ms: any("restarting it in 4.0 s" in m for m in ms))
    code = run_processes([crash], 10.0, stop=watch.stop)
    watch.close()
    assert watch.seen, _messages(caplog)
    crashes = [m for m in _messages(caplog) if "exited with code 3" in m]
    assert [m.rsplit(" in ", 1)[1] for m in crashes[:4]] == ["0.5 s", "1.0 s", "2.0 s", "4.0 s"]
    assert crashes[0].startswith("processes: worker 1 (pid ")
    assert code == 0  # nothing was running at the stop, or it stopped on the signal


def test_the_delay_stops_doubling_at_its_cap(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "BACKOFF_MAX_S", 1.0)
    crash = _python("import sys; sys.exit(3)")
    watch = _StopWhen(caplog, lambda ms: sum("exited with code 3" in m for m in ms) >= 4)
    run_processes([crash], 10.0, stop=watch.stop)
    watch.close()
    assert watch.seen, _messages(caplog)
    crashes = [m for m in _messages(caplog) if "exited with code 3" in m]
    assert [m.rsplit(" in ", 1)[1] for m in crashes[:4]] == ["0.5 s", "1.0 s", "1.0 s", "1.0 s"]


def test_the_delay_is_reset_after_a_child_ran_for_a_while(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "STABLE_S", 0.3)
    crash_late = _python("import sys, time; time.sleep(0.5); sys.exit(1)")
    watch = _StopWhen(caplog, lambda ms: sum("exited with code 1" in m for m in ms) >= 3)
    run_processes([crash_late], 10.0, stop=watch.stop)
    watch.close()
    assert watch.seen, _messages(caplog)
    crashes = [m for m in _messages(caplog) if "exited with code 1" in m]
    assert all(m.endswith("restarting it in 0.5 s") for m in crashes), crashes


def test_children_that_exit_0_are_not_restarted_and_the_supervisor_exits_0(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ok = _python("pass")
    watch = _StopWhen(caplog, lambda _ms: False)  # a safety net only
    code = run_processes([ok, ok], 10.0, stop=watch.stop)
    watch.close()
    assert not watch.fired  # it ended by itself, not by the stop
    assert code == 0
    messages = _messages(caplog)
    assert sum("exited with code 0; not restarting it" in m for m in messages) == 2
    assert "processes: every worker process exited" in messages


def test_a_child_exiting_2_stops_the_others_and_the_supervisor_exits_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    usage = _python("import sys, time; time.sleep(0.3); sys.exit(2)")
    forever = _python("import time; time.sleep(600)")
    watch = _StopWhen(caplog, lambda _ms: False)  # a safety net only
    code = run_processes([usage, forever], 10.0, stop=watch.stop)
    watch.close()
    assert not watch.fired  # the sleeping child was stopped by the supervisor
    assert code == 2
    messages = _messages(caplog)
    assert any(
        "exited with code 2 (a usage or configuration error); stopping" in m for m in messages
    )
    assert not any("restarting" in m for m in messages)


def test_exit_2_of_the_last_running_child_is_still_exit_2(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    pid_file = tmp_path / "ok.pid"
    ok = _python(
        f"import os, pathlib; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))"
    )
    # exits 2 only once the first child is reaped (the supervisor saw it exit 0)
    usage = _python(
        "import os, pathlib, sys, time\n"
        f"path = pathlib.Path({str(pid_file)!r})\n"
        "while not path.exists() or not path.read_text():\n"
        "    time.sleep(0.01)\n"
        "pid = int(path.read_text())\n"
        "while True:\n"
        "    try:\n"
        "        os.kill(pid, 0)\n"
        "    except ProcessLookupError:\n"
        "        sys.exit(2)\n"
        "    time.sleep(0.01)\n"
    )
    watch = _StopWhen(caplog, lambda _ms: False)  # a safety net only
    code = run_processes([ok, usage], 10.0, stop=watch.stop)
    watch.close()
    assert not watch.fired
    assert code == 2, _messages(caplog)


def test_a_child_that_ignores_the_stop_is_killed_and_the_stop_is_not_clean(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    stubborn = _python(
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(600)\n"
    )
    watch = _StopWhen(caplog, lambda _ms: ready.exists())
    code = run_processes([stubborn], 1.0, stop=watch.stop)
    watch.close()
    assert watch.seen
    messages = _messages(caplog)
    assert any(m.endswith("did not stop within 1 s; killing it") for m in messages), messages
    assert any("not a clean stop" in m and "was killed by SIGKILL" in m for m in messages)
    assert code == 1


def test_the_signal_handlers_are_restored(caplog: pytest.LogCaptureFixture) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert run_processes([_python("pass")], 10.0) == 0
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_describe_exit() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(-15) == "was killed by SIGTERM"
