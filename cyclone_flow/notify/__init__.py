"""Wakeups: publishing them after the commit, and listening for them (Engine Design:
LISTEN/NOTIFY and the Polling Floor; Client Options: Notifications, WithNotify,
WithNotifyCoalesce).

Two channels, shared by every schema and queue (a channel per queue would put queue names
into Postgres' channel namespace and force a new LISTEN per queue):

- ``cyclone_available``: ``{"schema": "<schema>", "queues": ["<queue>", ...]}`` — work
  became claimable in those queues (submit, a released dependent, a retry, a reclaim, a
  released lease, :meth:`Client.publish_wakeups <cyclone_flow.Client.publish_wakeups>`).
- ``cyclone_run_done``: ``{"schema": "<schema>", "run_ids": ["<uuid>", ...]}`` — those runs
  became terminal (completed, failed or cancelled); :meth:`Client.wait
  <cyclone_flow.Client.wait>` listens for it.

One notification can name several queues or runs (a batch); a batch whose payload would pass
Postgres' 8000-byte limit is split. Wakeups are latency hints only: publication is
best-effort, every failure is logged at error level and loses no work, because the claim
loop polls at least every ``poll_interval`` max seconds (the polling floor).

Modules: :mod:`~cyclone_flow.notify.wakeups` (the hints and their payload codec),
:mod:`~cyclone_flow.notify.publisher` (:class:`Publisher`), :mod:`~cyclone_flow.notify.listener`
(:class:`Listener`), :mod:`~cyclone_flow.notify.tracking` (:class:`TrackedConnections`,
:class:`WakeupTracker`), :mod:`~cyclone_flow.notify.hub` (:class:`WakeupHub`, which also
holds the run waiters of :meth:`Client.wait <cyclone_flow.Client.wait>`).
"""

from cyclone_flow.notify.hub import LISTENER_READY_S, WakeTarget, WakeupHub
from cyclone_flow.notify.listener import Listener
from cyclone_flow.notify.publisher import Publisher
from cyclone_flow.notify.tracking import TrackedConnections, WakeupTracker
from cyclone_flow.notify.wakeups import (
    CHANNEL_AVAILABLE,
    CHANNEL_RUN_DONE,
    MAX_PAYLOAD_BYTES,
    Publish,
    Wakeups,
    decode,
    encode,
)

__all__ = [
    "CHANNEL_AVAILABLE",
    "CHANNEL_RUN_DONE",
    "LISTENER_READY_S",
    "MAX_PAYLOAD_BYTES",
    "Listener",
    "Publish",
    "Publisher",
    "TrackedConnections",
    "WakeTarget",
    "WakeupHub",
    "WakeupTracker",
    "Wakeups",
    "decode",
    "encode",
]
