"""Payload limits at and over the limit, to the byte (Client Options: WithPayloadLimits):
a submit input is refused before any write; a handler output over the limit fails its
step permanently with error_kind payload_too_large. (Signals and fan-out outputs are
tested with their node types.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers.procs import wait_until
from helpers.rows import step_row

from cyclone_flow import Client, PayloadLimits, PayloadTooLargeError
from cyclone_flow.events import StepEvent
from cyclone_flow.flowfile import load_flow_text

ECHO = load_flow_text(
    "name: sized_input\nnodes:\n  s: {call: 'cyclone_test_handlers.basic:echo'}\n"
)
SIZED = load_flow_text(
    """
name: sized_output
nodes:
  s:
    call: cyclone_test_handlers.ops:sized_output
    retry: {max_attempts: 3, backoff: {initial: 0s}}
"""
)
LIMIT = 1000


def _runs(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0])


@pytest.mark.parametrize("limit", [LIMIT, 1024 * 1024])
def test_input_at_the_limit_is_accepted_one_byte_more_is_refused(
    make_client: Callable[..., Client], db: Any, limit: int
) -> None:
    options = {} if limit == 1024 * 1024 else {"payload_limits": PayloadLimits(input_bytes=limit)}
    client = make_client(**options)
    assert client.config.payload_limits.input_bytes == limit
    accented = "é" * ((limit - 2) // 2)  # bytes, not characters: 2 bytes each in UTF-8
    assert client.get_run(client.submit(ECHO, accented)).input == accented
    with pytest.raises(PayloadTooLargeError):
        client.submit(ECHO, accented + "x")
    at_limit = client.submit(ECHO, "x" * (limit - 2))
    assert client.get_run(at_limit).input == "x" * (limit - 2)
    with pytest.raises(PayloadTooLargeError) as info:
        client.submit(ECHO, "x" * (limit - 1))
    assert (info.value.kind, info.value.size, info.value.limit) == ("input", limit + 1, limit)
    assert f"{limit + 1} bytes, over the limit of {limit} bytes" in str(info.value)
    assert _runs(db) == 2, "the refused submit wrote nothing"


def test_oversized_input_in_submit_tx_writes_nothing(
    make_client: Callable[..., Client], db: Any, database_url: str
) -> None:
    import psycopg

    client = make_client(payload_limits=PayloadLimits(input_bytes=LIMIT))
    with psycopg.connect(database_url) as conn:
        with pytest.raises(PayloadTooLargeError):
            client.submit_tx(conn, ECHO, "x" * LIMIT)
        conn.commit()
    assert _runs(db) == 0


def test_output_at_the_limit_completes(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client(
        workers=1,
        payload_limits=PayloadLimits(output_bytes=LIMIT),
        allow_modules=["cyclone_test_handlers"],
    )
    client.start()
    run_id = client.submit(SIZED, {"bytes": LIMIT})
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", client.list_steps(run_id)
    assert status.output == {"s": "x" * (LIMIT - 2)}
    row = step_row(db, run_id)
    assert (row["state"], row["attempt"], row["error_kind"]) == ("completed", 1, None)


def test_output_over_the_limit_fails_the_step_permanently(
    make_client: Callable[..., Client], db: Any
) -> None:
    failures: list[tuple[StepEvent, BaseException]] = []
    client = make_client(
        workers=1,
        payload_limits=PayloadLimits(output_bytes=LIMIT),
        allow_modules=["cyclone_test_handlers"],
        error_handler=lambda event, exc: failures.append((event, exc)),
    )
    client.start()
    run_id = client.submit(SIZED, {"bytes": LIMIT + 1})
    status = client.wait(run_id, timeout=20)
    assert (status.state, status.error_kind) == ("failed", "step_discarded")
    row = step_row(db, run_id)
    assert (row["state"], row["error_kind"]) == ("discarded", "payload_too_large")
    assert (row["attempt"], row["max_attempts"]) == (1, 3), "no retry: the output would repeat"
    assert row["output"] is None
    assert row["error"] == f"output payload is {LIMIT + 1} bytes, over the limit of {LIMIT} bytes"
    # the hook runs after the commit that the run's wait may see first
    wait_until(lambda: failures, what="the error_handler call")
    assert len(failures) == 1
    event, exc = failures[0]
    assert (event.kind, event.error_kind) == ("discarded", "payload_too_large")
    assert isinstance(exc, PayloadTooLargeError)  # the engine's typed error, not a wrapper
    assert (exc.kind, exc.size, exc.limit) == ("output", LIMIT + 1, LIMIT)
