"""The statements of ``sql/notify.sql`` (no table): LISTEN and NOTIFY on the wakeup
channels."""

from __future__ import annotations

from collections.abc import Sequence

from cyclone_flow.db.conn import SessionLike, execute


def notify_publish(s: SessionLike, *, channels: Sequence[str], payloads: Sequence[str]) -> None:
    """One ``pg_notify(channels[i], payloads[i])`` per pair, in one statement."""
    execute(s, "notify_publish", {"channels": channels, "payloads": payloads})


def notify_listen(s: SessionLike) -> None:
    """LISTEN on ``cyclone_available`` and ``cyclone_run_done`` (an autocommit connection)."""
    execute(s, "notify_listen")


def notify_ping(s: SessionLike) -> None:
    """One round trip that proves the (listening) connection still answers."""
    execute(s, "notify_ping")
