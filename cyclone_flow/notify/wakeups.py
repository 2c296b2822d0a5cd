"""Wakeup hints and their payload codec: :class:`Wakeups` (what a transaction collects),
the :class:`Publish` callable, and :func:`encode` / :func:`decode` of the two channels'
JSON payloads (Engine Design: LISTEN/NOTIFY and the Polling Floor)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Protocol

from cyclone_flow._json import dumps
from cyclone_flow.db.conn import Conn

CHANNEL_AVAILABLE = "cyclone_available"
CHANNEL_RUN_DONE = "cyclone_run_done"


@dataclass
class Wakeups:
    """Wakeup hints collected by transitions (in the engine's ``Effects``); published only
    after the commit succeeds (Engine Design: LISTEN/NOTIFY and the Polling Floor):
    ``queues`` with work newly claimable, ``runs_done`` runs that became terminal."""

    queues: set[str] = field(default_factory=set)
    runs_done: set[str] = field(default_factory=set)

    def merge(self, other: Wakeups) -> None:
        self.queues |= other.queues
        self.runs_done |= other.runs_done

    def __bool__(self) -> bool:
        return bool(self.queues or self.runs_done)


class Publish(Protocol):
    """Publishes the wakeups of a transaction that has committed; ``conn``: the idle
    connection it committed on, for an inline send (None: a pool connection). Never
    raises for a failed send (:meth:`Publisher.publish`, ``Client._publish``)."""

    def __call__(self, wakeups: Wakeups, conn: Conn | None = None, /) -> None: ...


# Postgres rejects a payload of 8000 bytes or more; stay clear of it.
MAX_PAYLOAD_BYTES = 7_900


def encode(schema: str, wakeups: Wakeups) -> list[tuple[str, str]]:
    """The ``(channel, payload)`` notifications announcing ``wakeups`` of ``schema``: one
    per channel, split when a payload would pass :data:`MAX_PAYLOAD_BYTES`."""
    notes: list[tuple[str, str]] = []
    for channel, key, values in (
        (CHANNEL_AVAILABLE, "queues", sorted(wakeups.queues)),
        (CHANNEL_RUN_DONE, "run_ids", sorted(wakeups.runs_done)),
    ):
        batch: list[str] = []
        for value in values:
            if batch and _payload_size(schema, key, [*batch, value]) > MAX_PAYLOAD_BYTES:
                notes.append((channel, dumps({"schema": schema, key: batch})))
                batch = []
            batch.append(value)
        if batch:
            notes.append((channel, dumps({"schema": schema, key: batch})))
    return notes


def _payload_size(schema: str, key: str, values: list[str]) -> int:
    return len(dumps({"schema": schema, key: values}).encode("utf-8"))


def decode(channel: str, payload: str, schema: str) -> list[str] | None:
    """The queues (``cyclone_available``) or run ids (``cyclone_run_done``) a notification
    names for ``schema``; None for another schema, another channel or a payload that is not
    ours."""
    key = {CHANNEL_AVAILABLE: "queues", CHANNEL_RUN_DONE: "run_ids"}.get(channel)
    if key is None:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("schema") != schema:
        return None
    values = data.get(key)
    if not isinstance(values, list):
        return None
    return [v for v in values if isinstance(v, str)]
