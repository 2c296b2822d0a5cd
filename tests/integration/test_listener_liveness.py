"""A half-open LISTEN connection (Engine Design: LISTEN/NOTIFY and the Polling Floor):
a TCP proxy between the client and Postgres stops forwarding the listener's
connection without closing it. The listener's liveness ping notices, cuts the socket and
LISTENs again on a new connection, so ``wait()`` is woken by notifications again rather
than by polling alone; and ``shutdown()`` does not wait on the stuck socket (it used to
take 5 s, the listener never noticed anything)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers.flows import step_flow
from helpers.procs import wait_until
from helpers.tcp_proxy import Pair, TcpProxy

from cyclone_flow import Client

OPS = "cyclone_test_handlers.ops"
ECHO = "cyclone_test_handlers.basic:echo"
POLL_MAX_S = 4.0  # the waiter's polling floor: a wait woken sooner was woken by a wakeup


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    tcp = TcpProxy(database_url)
    yield tcp
    tcp.close()


def _listening(pair: Pair) -> bool:
    return pair.listens


def _waiter(proxy: TcpProxy, schema: str) -> Client:
    """A client that only waits, through the proxy, its listener started and ready."""
    return Client(proxy.url(), schema=schema, poll_interval=(0.05, POLL_MAX_S))


def test_a_silent_listen_connection_is_replaced_and_wakeups_flow_again(
    proxy: TcpProxy, make_client: Callable[..., Client], db: Any, schema: str, tmp_path: Any
) -> None:
    worker = make_client(workers=1)
    worker.start()
    waiter = _waiter(proxy, schema)
    try:
        warm = worker.submit(step_flow(ECHO, name="warm"), {"x": 1})
        assert waiter.wait(warm, timeout=30).state == "completed"
        listener = waiter.listener
        assert listener is not None
        wait_until(listener.ready.is_set, 10, what="the listener")
        assert (listener.connects, proxy.freeze(_listening)) == (1, 1)
        frozen_at = time.monotonic()

        wait_until(lambda: listener.connects == 2 and listener.ready.is_set(), 15,
                   what="the listener to replace its silent connection")  # fmt: skip
        replaced_s = time.monotonic() - frozen_at
        print(f"silent LISTEN connection replaced after {replaced_s:.2f}s")
        # a ping after POLL_MAX_S / 2 quiet seconds, unanswered for as long again
        assert replaced_s < POLL_MAX_S + 2

        # a run that ends after the wait's polling backed off: only a wakeup is prompt
        marker = tmp_path / "ran"
        run_id = worker.submit(
            step_flow(f"{OPS}:short_sleep", name="slow"), {"marker": str(marker), "seconds": 4}
        )
        status = waiter.wait(run_id, timeout=60)
        lag = db.execute(
            "SELECT extract(epoch FROM now() - finished_at) FROM "
            f'"{schema}".cyclone_runs WHERE id = %s',
            (run_id,),
        ).fetchone()[0]
        assert status.state == "completed"
        print(f"wait() returned {float(lag):.3f}s after the run finished")
        assert float(lag) < 1.5, "woken by polling, not by the new LISTEN connection"
    finally:
        started = time.monotonic()
        waiter.shutdown()
        assert time.monotonic() - started < 3


def test_shutdown_does_not_wait_on_a_stuck_listen_socket(
    proxy: TcpProxy, make_client: Callable[..., Client], schema: str
) -> None:
    worker = make_client(workers=1)
    worker.start()
    waiter = _waiter(proxy, schema)
    try:
        run_id = worker.submit(step_flow(ECHO, name="warm"), {"x": 1})
        assert waiter.wait(run_id, timeout=30).state == "completed"
        listener = waiter.listener
        assert listener is not None
        wait_until(listener.ready.is_set, 10, what="the listener")
        assert proxy.freeze(_listening) == 1
    finally:
        started = time.monotonic()
        waiter.shutdown()
        took = time.monotonic() - started
    print(f"shutdown with a stuck LISTEN socket took {took:.2f}s")
    assert took < 2.0
