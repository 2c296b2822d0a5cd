"""The event loop of async handlers (:mod:`cyclone_flow.worker.aio`), without a
database: results and exceptions reach the waiting thread, a set cancel event cancels the
task and ``run`` returns only after the coroutine's ``finally`` ran, SystemExit does not
stop the shared loop, ``stop`` ends the calls still waiting, and a task that ignores its
cancellation is abandoned with one warning naming its step."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
from collections.abc import Iterator

import pytest

from cyclone_flow.worker.aio import EventLoop, HandlerCancelled


@pytest.fixture
def loop() -> Iterator[EventLoop]:
    event_loop = EventLoop()
    try:
        yield event_loop
    finally:
        event_loop.stop()


async def _value(v: int) -> int:
    await asyncio.sleep(0)
    return v * 2


async def _raise(exc: BaseException) -> None:
    await asyncio.sleep(0)
    raise exc


def test_results_and_exceptions_reach_the_caller_and_the_loop_is_started_lazily(
    loop: EventLoop,
) -> None:
    assert not loop.running
    assert loop.run(_value(21), threading.Event()) == 42
    assert loop.running
    with pytest.raises(ValueError, match="bad"):
        loop.run(_raise(ValueError("bad")), threading.Event())
    with pytest.raises(SystemExit):
        loop.run(_raise(SystemExit(3)), threading.Event())
    assert loop.run(_value(1), threading.Event()) == 2  # the loop still serves


def test_a_set_cancel_event_cancels_the_task_and_run_waits_for_its_end(
    loop: EventLoop,
) -> None:
    cancel = threading.Event()
    seen: list[str] = []

    async def hang() -> None:
        try:
            cancel.set()  # told while it sleeps
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            await asyncio.sleep(0.1)  # cleanup that takes a while
            seen.append("cleaned up")
            raise

    with pytest.raises(HandlerCancelled) as info:
        loop.run(hang(), cancel)
    assert seen == ["cancelled", "cleaned up"]  # before run() returned
    assert isinstance(info.value.__cause__, asyncio.CancelledError)


def test_a_coroutine_that_catches_the_cancellation_ends_as_it_chose(loop: EventLoop) -> None:
    cancel = threading.Event()

    async def stubborn() -> str:
        cancel.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return "caught"
        return "slept"

    assert loop.run(stubborn(), cancel) == "caught"


def test_stop_ends_a_waiting_call_and_refuses_later_ones() -> None:
    loop = EventLoop()
    entered = threading.Event()
    outcome: list[BaseException] = []

    async def hang() -> None:
        entered.set()
        await asyncio.sleep(3600)

    def waiter() -> None:
        try:
            loop.run(hang(), threading.Event())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    assert entered.wait(10)
    loop.stop(timeout=5)
    thread.join(10)
    assert [type(e) for e in outcome] == [HandlerCancelled]
    assert not loop.running

    async def later() -> None:
        return None

    with pytest.raises(HandlerCancelled, match="stopped"):
        loop.run(later(), threading.Event())


def test_stop_abandons_a_task_that_ignores_cancellation_with_one_line_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No asyncio ``Task was destroyed but it is pending!`` (an ERROR of the ``asyncio``
    logger) when such a task is collected after the loop closed."""
    log = logging.getLogger("test_aio.abandon")
    loop = EventLoop(log=log)
    entered = threading.Event()

    async def stubborn() -> None:
        entered.set()
        while True:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    def waiter() -> None:
        with contextlib.suppress(HandlerCancelled):
            loop.run(stubborn(), threading.Event(), label="step s of run r")

    thread = threading.Thread(target=waiter)
    thread.start()
    assert entered.wait(10)
    loop_thread = loop._thread
    assert loop_thread is not None
    with caplog.at_level(logging.WARNING):
        loop.stop(timeout=0.2)
        loop_thread.join(10)  # it closed the loop
        thread.join(10)
        gc.collect()  # the abandoned task (a cycle with its call) is collected now
    assert not loop_thread.is_alive() and not thread.is_alive()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert [r.getMessage() for r in caplog.records if r.name == log.name] == [
        "abandoned an async handler that ignored cancellation: step s of run r"
    ]
