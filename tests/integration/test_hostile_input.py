"""Hostile strings and numbers given to the Python API: each is
refused with a typed error before anything is written, instead of a psycopg, Unicode or
OS error (or a run that can never be stored or claimed)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from helpers.engine import database

from cyclone_flow import (
    Client,
    ConfigError,
    InputValidationError,
    RunNotFoundError,
    RunStateError,
    ScheduleNotFoundError,
    SubmitOptionError,
)
from cyclone_flow.flowfile import load_flow_text

NOOP = "cyclone_test_handlers.queueing:noop"
FLOW = load_flow_text("name: hostile\nnodes:\n  a: {call: 'cyclone_test_handlers.basic:echo'}\n")
WAITS = load_flow_text(
    "name: waits\nnodes:\n  w: {type: wait_signal, signal: go}\n"
    "  after: {call: 'cyclone_test_handlers.basic:echo', needs: [w]}\n"
)
EMOJI_KEY = "\U0001f600" * 1000  # 1000 characters, 4000 bytes: over a btree index entry


def _runs(db: Any) -> int:
    return int(db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0])


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("a\ud800b", "lone surrogate (U+D800)"),
        ({"k\udcff": 1}, "lone surrogate (U+DCFF)"),
        ([1, {"deep": ["\x00"]}], "NUL character"),
    ],
)
def test_unstorable_input_and_args_are_refused(
    make_client: Callable[..., Client], db: Any, value: Any, needle: str
) -> None:
    client = make_client()
    with pytest.raises(InputValidationError, match=re.escape(needle)):
        client.submit(FLOW, value)
    with pytest.raises(InputValidationError, match=re.escape(needle)):
        client.enqueue(NOOP, value)
    with (
        database(client).pool.connection() as conn,
        pytest.raises(InputValidationError, match=re.escape(needle)),
    ):
        client.submit_tx(conn, FLOW, value)
    with pytest.raises(InputValidationError, match=re.escape(needle)):
        client.add_schedule(FLOW, "0 * * * *", input=value, name="s")
    assert _runs(db) == 0
    assert client.list_schedules() == []


def test_unstorable_signal_payload_is_refused(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client()
    run_id = client.submit(WAITS)
    for payload in ("\ud800", {"x": "a\x00"}, {"\udc80": 1}):
        with pytest.raises(InputValidationError, match=r"^payload of signal 'go': contains"):
            client.signal(run_id, "go", payload)
    assert db.execute("SELECT count(*) FROM cyclone_signals").fetchone() == (0,)


def test_signal_errors_are_about_the_signal(make_client: Callable[..., Client]) -> None:
    # they read "input of flow 'signal' is invalid: ..."
    client = make_client()
    run_id = client.submit(WAITS)
    for name, payload, start in (
        ("bad name", None, "invalid signal name 'bad name': letters, digits"),
        ("x" * 10_000, None, "invalid signal name 'xxx"),
        ("go", {1, 2}, "payload of signal 'go': not JSON: "),
    ):
        with pytest.raises(InputValidationError) as info:
            client.signal(run_id, name, payload)
        assert str(info.value).startswith(start) and "input of flow" not in str(info.value)
        assert len(str(info.value)) < 400


def test_a_long_run_id_is_not_echoed_in_full(make_client: Callable[..., Client]) -> None:
    client = make_client()
    with pytest.raises(RunNotFoundError) as info:
        client.get_run("r" * 10_000)
    assert str(info.value).startswith("run 'rrr") and str(info.value).endswith(" not found")
    assert "more characters" in str(info.value) and len(str(info.value)) < 300


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"unique_key": "a\ud800"}, "lone surrogate"),
        ({"sequence": "\udcff"}, "lone surrogate"),
        ({"unique_key": EMOJI_KEY}, "at most 2000 bytes"),
        ({"sequence": EMOJI_KEY}, "at most 2000 bytes"),
        ({"queue": "default\n"}, "queue name"),
        ({"delay": 1e-320}, "0 or at least 1ms"),
        ({"delay": 10**400}, "at most 366 days"),
        ({"unique_key": "k", "unique_window": 0.0001}, "at least 1ms"),
    ],
)
def test_hostile_submission_options_raise_and_write_nothing(
    make_client: Callable[..., Client], db: Any, options: dict[str, Any], needle: str
) -> None:
    client = make_client()
    with pytest.raises(SubmitOptionError, match=re.escape(needle)):
        client.submit(FLOW, **options)
    with pytest.raises(SubmitOptionError, match=re.escape(needle)):
        client.enqueue(NOOP, **options)
    assert _runs(db) == 0


@pytest.mark.parametrize(
    ("call", "options", "needle"),
    [
        # item 3: backoffs whose arithmetic overflowed, or ints no float holds
        (NOOP, {"retry": {"backoff": {"initial": 1e-320, "max": "5m"}}}, "0 or at least 1ms"),
        (NOOP, {"retry": {"backoff": {"max": 5e-324}}}, "0 or at least 1ms"),
        (NOOP, {"retry": {"backoff": {"initial": 10**400}}}, "at most 366 days"),
        (NOOP, {"retry": {"backoff": {"multiplier": 1e308}}}, "multiplier: a number from 1"),
        (NOOP, {"retry": {"backoff": {"multiplier": 10**400}}}, "multiplier: a number from 1"),
        (NOOP, {"retry": {"backoff": {"jitter": 10**400}}}, "jitter: from 0 to 1"),
        (NOOP, {"retry": {"max_attempts": 10**5000}}, "max_attempts must be"),
        (NOOP, {"timeout": 1e-320}, "at least 1ms"),
        (NOOP, {"timeout": 10**400}, "at most 366 days"),
        # item 4: callables that pass a Python `$` or are too long for an index entry
        (f"{NOOP}\n", {}, "callable="),
        ("m:" + "f" * 5000, {}, "at most 1000 characters"),
    ],
)
def test_hostile_job_options_raise(
    make_client: Callable[..., Client], db: Any, call: str, options: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SubmitOptionError, match=re.escape(needle)) as info:
        make_client().enqueue(call, None, **options)
    assert len(str(info.value)) < 1000  # the value is shown cut, never whole
    assert _runs(db) == 0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"timezone": "A" * 300}, "timezone="),
        ({"timezone": "Europe/" + "x" * 5000}, "timezone="),
        ({"timezone": "Europe/Paris\x00"}, "timezone="),
        ({"timezone": "\ud800"}, "timezone="),
        ({"name": "nightly\n"}, "name="),
        ({"name": "a\udcff"}, "name="),
    ],
)
def test_hostile_schedule_options_raise(
    make_client: Callable[..., Client], kwargs: dict[str, Any], needle: str
) -> None:
    client = make_client()
    with pytest.raises(SubmitOptionError, match=re.escape(needle)):
        client.add_schedule(FLOW, "0 * * * *", **kwargs)
    assert client.list_schedules() == []


def test_cancel_reason_and_lookups_with_unstorable_text(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    run_id = client.submit(WAITS)
    assert client.cancel(run_id, reason="stop\x00 now \ud800")
    assert client.get_run(run_id).error == "stop\\x00 now \\ud800"
    assert client.list_runs(flow="\udcff") == [] and client.retry_all("a\x00") == []
    with pytest.raises(RunStateError, match="has no node"):
        client.retry(run_id, node="w\ud800")
    for action in (client.remove_schedule, client.pause_schedule, client.resume_schedule):
        with pytest.raises(ScheduleNotFoundError):
            action("\udcff")


def test_client_id_that_cannot_be_stored_is_a_config_error(
    make_client: Callable[..., Client],
) -> None:
    for bad in ("worker\x00", "host-\udcff"):
        with pytest.raises(ConfigError, match="client_id must not contain"):
            make_client(client_id=bad)
