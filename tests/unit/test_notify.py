"""Wakeup payloads (Engine Design: LISTEN/NOTIFY and the Polling Floor): one channel per
kind, JSON naming the schema and the queues or runs, batches split below Postgres' 8000-byte
payload limit."""

from __future__ import annotations

import json
import uuid

from cyclone_flow.notify import (
    CHANNEL_AVAILABLE,
    CHANNEL_RUN_DONE,
    MAX_PAYLOAD_BYTES,
    Wakeups,
    decode,
    encode,
)


def test_one_notification_per_channel_names_every_queue_and_run() -> None:
    run = str(uuid.uuid4())
    notes = encode("app", Wakeups(queues={"b", "a"}, runs_done={run}))
    assert notes == [
        (CHANNEL_AVAILABLE, '{"schema":"app","queues":["a","b"]}'),
        (CHANNEL_RUN_DONE, f'{{"schema":"app","run_ids":["{run}"]}}'),
    ]
    assert decode(*notes[0], "app") == ["a", "b"]
    assert decode(*notes[1], "app") == [run]


def test_empty_wakeups_send_nothing() -> None:
    assert encode("app", Wakeups()) == []
    assert encode("app", Wakeups(queues={"q"})) == [
        (CHANNEL_AVAILABLE, '{"schema":"app","queues":["q"]}')
    ]


def test_a_large_batch_is_split_below_the_payload_limit() -> None:
    runs = {str(uuid.uuid4()) for _ in range(1000)}
    queues = {f"queue-{i:03d}-" + "x" * 50 for i in range(300)}
    notes = encode("s" * 63, Wakeups(queues=queues, runs_done=runs))
    assert len(notes) > 2
    assert all(len(payload.encode()) <= MAX_PAYLOAD_BYTES < 8000 for _, payload in notes)
    got_runs = [r for ch, p in notes if ch == CHANNEL_RUN_DONE for r in json.loads(p)["run_ids"]]
    got_queues = [q for ch, p in notes if ch == CHANNEL_AVAILABLE for q in json.loads(p)["queues"]]
    assert sorted(got_runs) == sorted(runs)
    assert sorted(got_queues) == sorted(queues)


def test_decode_ignores_other_schemas_channels_and_foreign_payloads() -> None:
    payload = '{"schema":"app","queues":["a"]}'
    assert decode(CHANNEL_AVAILABLE, payload, "other") is None
    assert decode("some_channel", payload, "app") is None
    assert decode(CHANNEL_AVAILABLE, "not json", "app") is None
    assert decode(CHANNEL_AVAILABLE, '["app"]', "app") is None
    assert decode(CHANNEL_AVAILABLE, '{"schema":"app","queues":"a"}', "app") is None
    assert decode(CHANNEL_AVAILABLE, '{"schema":"app","queues":["a",3]}', "app") == ["a"]
    assert decode(CHANNEL_RUN_DONE, payload, "app") is None  # run_ids missing
