"""The step-log capture without a database (cyclone_flow.worker.step_logs): a handler
thread's writes and records go to its attempt's buffer while another thread's writes
pass through; ``ctx.log`` keeps INFO records whatever its logger's level, with a
traceback for ``exception()``; the proxies come off when the capture stops."""

from __future__ import annotations

import logging
import sys
import threading

import pytest

from cyclone_flow.logs import step_extra
from cyclone_flow.worker.step_logs import StepLogger, StepLogs, ThreadStream


def test_only_the_capturing_thread_is_captured(capsys: pytest.CaptureFixture[str]) -> None:
    logs = StepLogs(None, 10_000, logging.getLogger("test"))  # type: ignore[arg-type]
    logs.start()
    try:
        assert isinstance(sys.stdout, ThreadStream)
        with logs.capture() as attempt:
            print("mine")
            other = threading.Thread(target=lambda: print("someone else's"))
            other.start()
            other.join()
            log = StepLogger(logging.getLogger("cyclone_flow.step"), step_extra("r", "n", 1))
            logging.getLogger("cyclone_flow.step").setLevel(logging.WARNING)
            log.info("kept at %s", "info")
            log.debug("not kept")
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                log.exception("with its traceback")
    finally:
        logging.getLogger("cyclone_flow.step").setLevel(logging.NOTSET)
        logs.stop()
    assert attempt is not None
    messages = [(stream, level, text.splitlines()[0]) for _, stream, level, text in attempt.lines]
    assert messages == [
        ("stdout", None, "mine"),
        ("log", "INFO", "cyclone_flow.step: kept at info"),
        ("log", "ERROR", "cyclone_flow.step: with its traceback"),
    ]
    assert "RuntimeError: boom" in attempt.lines[-1][3]
    assert capsys.readouterr().out == "someone else's\n"
    assert not isinstance(sys.stdout, ThreadStream)


def test_off_captures_nothing() -> None:
    logs = StepLogs(None, 0, logging.getLogger("test"))  # type: ignore[arg-type]
    logs.start()
    with logs.capture() as attempt:
        assert attempt is None and not isinstance(sys.stdout, ThreadStream)
    logs.stop()
