"""Client options (seeds: Client Options), validated at construction, never at first use.

``Client(database, **options)`` applies options in the order given, so a scalar's last value
wins, and ``workers`` / ``worker_queues`` write the same field: whichever comes last
replaces the other (``workers=n`` means ``{"default": n}``). ``tx_slots`` defaults to the
total worker count whatever the order.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from cyclone_flow.durations import MAX_FLOW_DURATION_S, DurationError, check_seconds
from cyclone_flow.errors import ConfigError
from cyclone_flow.logs import default_logger
from cyclone_flow.names import (
    DEFAULT_QUEUE,
    LIMITED_OWNER,
    validate_queue_name,
    validate_schema_name,
)
from cyclone_flow.text import describe_unstorable

POOL_RESERVE = 6  # Engine Design: Pool Budget, MaxConns >= txSlots + 6
MAX_LEASE_TTL_S = 86_400.0  # a day: the TTL bounds crash detection, not handler length
MAX_POLL_S = 3_600.0
MAX_NOTIFY_COALESCE_S = 60.0  # a longer window only delays what polling would find anyway
MAX_SIGNAL_WAIT_S = MAX_FLOW_DURATION_S  # the longest duration a flow file may give

# The seeds' Client Options one for one: keyword option -> the seed's option. docs/options.md
# lists exactly these (tests/unit/test_options_doc.py keeps the table, this mapping and the
# defaults of ClientConfig in step). The other keywords (schema, allow_modules,
# sweep_interval, check_schema) are cyclone-flow's own.
SEED_OPTIONS: dict[str, str] = {
    "workers": "WithWorkers(n)",
    "worker_queues": "WithWorkerQueues(map[string]int)",
    "tx_slots": "WithTxSlots(n)",
    "client_id": "WithClientID(id)",
    "lease_ttl": "WithLeaseTTL(d)",
    "max_reclaims": "WithMaxReclaims(n)",
    "poll_interval": "WithPollInterval(min, max)",
    "max_signal_wait": "WithMaxSignalWait(d)",
    "notify": "WithNotify(enabled bool)",
    "notify_coalesce": "WithNotifyCoalesce(d time.Duration)",
    "logger": "WithLogger(*slog.Logger)",
    "on_step_event": "WithOnStepEvent(fn)",
    "error_handler": "WithErrorHandler(fn)",
    "payload_limits": "WithPayloadLimits(l)",
    "retention": "WithRetentionSweep(cfg)",
}


@dataclass(frozen=True)
class PayloadLimits:
    """Byte limits of encoded JSON payloads (Client Options: WithPayloadLimits)."""

    input_bytes: int = 1024 * 1024
    output_bytes: int = 1024 * 1024
    signal_bytes: int = 256 * 1024


STEP_LOG_BYTES = 64 * 1024
"""Default ``step_log_bytes``: bytes of logs and output kept per attempt."""
MAX_STEP_LOG_BYTES = 16 * 1024 * 1024
STEP_LOG_FLUSH_S = 1.0
"""Default ``step_log_flush_interval``: seconds a running attempt's line waits, at most,
before it is stored."""
MAX_STEP_LOG_FLUSH_S = 60.0

RETENTION_BATCH_SIZE = 100  # runs deleted per statement by the retention sweep
RETENTION_INTERVAL_S = 60.0  # seconds between two passes of the retention sweep


@dataclass(frozen=True)
class RetentionConfig:
    """Background purge of terminal runs inside :meth:`Client.start` (Client Options:
    WithRetentionSweep; Retention).

    - ``default_age``: seconds after ``finished_at`` a completed, failed or cancelled run
      is deleted with its steps and deps; a non-positive age disables the sweep
    - ``batch_size``: runs deleted per statement (default ``RETENTION_BATCH_SIZE``)
    - ``interval``: seconds between passes (default ``RETENTION_INTERVAL_S``)
    """

    default_age: float = 0.0
    batch_size: int = RETENTION_BATCH_SIZE
    interval: float = RETENTION_INTERVAL_S

    @property
    def enabled(self) -> bool:
        """Whether the sweep runs: ``default_age > 0``."""
        return self.default_age > 0


class ClientOptions(TypedDict, total=False):
    """Keyword options of :class:`cyclone_flow.Client`; see :class:`ClientConfig`."""

    schema: str
    workers: int
    worker_queues: Mapping[str, int]
    tx_slots: int
    client_id: str
    lease_ttl: float
    max_reclaims: int
    poll_interval: tuple[float, float]
    notify: bool
    notify_coalesce: float
    logger: logging.Logger | None
    on_step_event: Callable[[Any], None] | None
    error_handler: Callable[[Any, BaseException], None] | None
    payload_limits: PayloadLimits
    retention: RetentionConfig | None
    allow_modules: Any
    sweep_interval: float
    check_schema: bool
    max_signal_wait: float
    step_log_bytes: int
    step_log_flush_interval: float
    prepare: bool


def _default_client_id() -> str:
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
    return f"{socket.gethostname()}/{os.getpid()}/{suffix}"


@dataclass(frozen=True)
class ClientConfig:
    """Validated options with the seeds' defaults. Durations are seconds.

    - ``worker_queues``: queue -> worker count (default ``{"default": 4}``)
    - ``tx_slots``: cap on concurrent completion transactions (default: total workers)
    - ``lease_ttl``: 30 s; the heartbeat renews every ``lease_ttl / 3``
    - ``max_reclaims``: 0 = unbounded
    - ``poll_interval``: (min, max) = (0.1, 1.0) s; max bounds a lost wakeup's delay
    - ``logger``: the ``cyclone_flow`` logger with a stderr text handler at INFO
      (``DEBUG`` env: debug); ``None`` restores it (see :mod:`cyclone_flow.logs`)
    - ``payload_limits``: inputs 1 MiB, outputs 1 MiB, signals 256 KiB
    - ``retention``: None (off); see :class:`RetentionConfig`
    - ``notify``: True; False turns off listening only (claims on poll ticks, ``wait``
      polls); wakeups are still published
    - ``notify_coalesce``: 0 s = publish every wakeup at once; a window in seconds (at most
      60) batches the wakeups published inside it (Client Options: WithNotifyCoalesce)
    - ``sweep_interval``: how often the recovery sweep (and the wait and deadline
      scanners) run (default ``lease_ttl / 3``, at most 10 s)
    - ``max_signal_wait``: 0 s = no cap; the default bound of the wait of a wait_signal
      node without ``max_wait`` (Client Options: WithMaxSignalWait). Submit copies it onto
      the run: the value of the client that submits a run applies to it (and to its child
      runs). A zero or negative value leaves such waits uncapped.
    - ``step_log_bytes``: 64 KiB; what a handler logs and prints per attempt is kept up to
      that many bytes (UTF-8) in ``cyclone_step_logs``, the cut marked by a last line; 0
      turns the capture off (handlers print to the process's stdout again)
    - ``step_log_flush_interval``: 1 s; a running attempt's lines are stored at most that
      long after they were written (at most 60 s)
    - ``prepare``: True; False never prepares a statement on the server (psycopg
      ``prepare_threshold=None`` on the client's own pool), for PgBouncer in transaction
      mode; a pool passed to ``Client`` keeps its own setting

    docs/options.md has the table of every option with the seeds' names.
    """

    schema: str = "public"
    worker_queues: Mapping[str, int] = field(default_factory=lambda: {DEFAULT_QUEUE: 4})
    tx_slots: int = 4
    client_id: str = field(default_factory=_default_client_id)
    lease_ttl: float = 30.0
    max_reclaims: int = 0
    poll_interval: tuple[float, float] = (0.1, 1.0)
    notify: bool = True
    notify_coalesce: float = 0.0
    logger: logging.Logger = field(default_factory=default_logger)
    on_step_event: Callable[[Any], None] | None = None
    error_handler: Callable[[Any, BaseException], None] | None = None
    payload_limits: PayloadLimits = field(default_factory=PayloadLimits)
    retention: RetentionConfig | None = None
    allow_modules: Any = None
    sweep_interval: float = 10.0
    check_schema: bool = True
    max_signal_wait: float = 0.0
    step_log_bytes: int = STEP_LOG_BYTES
    step_log_flush_interval: float = STEP_LOG_FLUSH_S
    prepare: bool = True

    @property
    def workers(self) -> int:
        """Total worker count: the sum of ``worker_queues``."""
        return sum(self.worker_queues.values())

    @property
    def pool_min_size(self) -> int:
        """The pool budget: ``tx_slots + 6`` connections (Engine Design: Pool Budget)."""
        return self.tx_slots + POOL_RESERVE


def _seconds(name: str, value: Any, max_s: float) -> float:
    """A positive number of seconds up to ``max_s``; raise :class:`ConfigError`."""
    try:
        return check_seconds(value, max_s=max_s)
    except DurationError as exc:
        if exc.kind == "type":
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
        raise ConfigError(
            f"{name} must be above 0 and at most {max_s:g} seconds, got {value!r}"
        ) from None


def _is_int_at_least(value: Any, low: int) -> bool:
    """``value`` is an int (not a bool) of at least ``low``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _int_at_least(name: str, value: Any, low: int) -> int:
    """An integer of at least ``low``; raise :class:`ConfigError`."""
    if not _is_int_at_least(value, low):
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def validate_retention(value: Any) -> RetentionConfig | None:
    """A valid :class:`RetentionConfig` (or None: off); raise :class:`ConfigError`."""
    if value is None:
        return None
    if not isinstance(value, RetentionConfig):
        raise ConfigError(f"retention must be a RetentionConfig or None, got {value!r}")
    age = value.default_age
    if isinstance(age, bool) or not isinstance(age, int | float) or age != age:
        raise ConfigError(f"retention.default_age must be a number of seconds, got {age!r}")
    size = value.batch_size
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 100_000:
        raise ConfigError(f"retention.batch_size must be an integer from 1 to 100000, got {size!r}")
    _seconds("retention.interval", value.interval, MAX_POLL_S)
    return value


# -- one validator per option: (name, value) -> the validated value ----------------------


def _workers(name: str, value: Any) -> dict[str, int]:
    return {DEFAULT_QUEUE: _int_at_least(name, value, 1)}


def _worker_queues(_name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping) or not value:
        raise ConfigError("worker_queues must be a non-empty mapping of queue -> count")
    queues = {}
    for queue, count in value.items():
        validate_queue_name(queue)
        queues[queue] = _int_at_least(f"worker count of queue {queue!r}", count, 1)
    return queues


def _client_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    if (reason := describe_unstorable(value)) is not None:
        raise ConfigError(f"{name} must not contain {reason}, got {value!r}")
    if value == LIMITED_OWNER:
        raise ConfigError(f"{name} {value!r} is reserved (it marks steps with limits)")
    return value


def _poll_interval(name: str, value: Any) -> tuple[float, float]:
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ConfigError(f"{name} must be (min, max) seconds, got {value!r}")
    lo = _seconds(f"{name} min", value[0], MAX_POLL_S)
    hi = _seconds(f"{name} max", value[1], MAX_POLL_S)
    if lo > hi:
        raise ConfigError(f"{name} min {lo} s is above max {hi} s")
    return lo, hi


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return value


def _notify_coalesce(name: str, value: Any) -> float:
    try:
        return check_seconds(value, max_s=MAX_NOTIFY_COALESCE_S, allow_zero=True)
    except DurationError:
        raise ConfigError(
            f"{name} must be a number of seconds from 0 (off) to "
            f"{MAX_NOTIFY_COALESCE_S:g}, got {value!r}"
        ) from None


def _logger(name: str, value: Any) -> logging.Logger:
    if value is not None and not isinstance(value, logging.Logger):
        raise ConfigError(f"{name} must be a logging.Logger or None, got {value!r}")
    return value if value is not None else default_logger()


def _callback(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise ConfigError(f"{name} must be callable or None, got {value!r}")
    return value


def _payload_limits(name: str, value: Any) -> PayloadLimits:
    if not isinstance(value, PayloadLimits):
        raise ConfigError(f"{name} must be a PayloadLimits")
    for field_name in ("input_bytes", "output_bytes", "signal_bytes"):
        if not _is_int_at_least(getattr(value, field_name), 1):
            raise ConfigError(f"{name}.{field_name} must be an integer >= 1")
    return value


def _max_signal_wait(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    if value > MAX_SIGNAL_WAIT_S:
        raise ConfigError(
            f"{name} must be at most {MAX_SIGNAL_WAIT_S:g} seconds (366 days), got {value!r}"
        )
    return float(value) if value > 0 else 0.0  # zero or negative: no cap


def _step_log_bytes(name: str, value: Any) -> int:
    if not _is_int_at_least(value, 0) or value > MAX_STEP_LOG_BYTES:
        raise ConfigError(
            f"{name} must be an integer from 0 (capture off) to {MAX_STEP_LOG_BYTES} bytes, "
            f"got {value!r}"
        )
    return int(value)


def _seconds_up_to(max_s: float) -> Callable[[str, Any], float]:
    return lambda name, value: _seconds(name, value, max_s)


def _int_from(low: int) -> Callable[[str, Any], int]:
    return lambda name, value: _int_at_least(name, value, low)


_VALIDATORS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    # option -> (the ClientConfig field it sets, its validator)
    "workers": ("worker_queues", _workers),
    "worker_queues": ("worker_queues", _worker_queues),
    "tx_slots": ("tx_slots", _int_from(1)),
    "schema": ("schema", lambda _name, value: validate_schema_name(value)),
    "client_id": ("client_id", _client_id),
    "lease_ttl": ("lease_ttl", _seconds_up_to(MAX_LEASE_TTL_S)),
    "max_reclaims": ("max_reclaims", _int_from(0)),
    "poll_interval": ("poll_interval", _poll_interval),
    "notify": ("notify", _flag),
    "notify_coalesce": ("notify_coalesce", _notify_coalesce),
    "logger": ("logger", _logger),
    "on_step_event": ("on_step_event", _callback),
    "error_handler": ("error_handler", _callback),
    "payload_limits": ("payload_limits", _payload_limits),
    "retention": ("retention", lambda _name, value: validate_retention(value)),
    "allow_modules": ("allow_modules", lambda _name, value: value),
    "sweep_interval": ("sweep_interval", _seconds_up_to(MAX_POLL_S)),
    "check_schema": ("check_schema", lambda _name, value: bool(value)),
    "max_signal_wait": ("max_signal_wait", _max_signal_wait),
    "step_log_bytes": ("step_log_bytes", _step_log_bytes),
    "step_log_flush_interval": ("step_log_flush_interval", _seconds_up_to(MAX_STEP_LOG_FLUSH_S)),
    "prepare": ("prepare", _flag),
}


def build_config(options: Mapping[str, Any]) -> ClientConfig:
    """Validate ``options`` in the order given; raise :class:`ConfigError` naming the
    first bad option. ``tx_slots`` defaults to the total worker count and
    ``sweep_interval`` to ``lease_ttl / 3`` (at least 0.05 s, at most 10 s), whatever the
    order."""
    values: dict[str, Any] = {}
    for name, value in options.items():
        entry = _VALIDATORS.get(name)
        if entry is None:
            raise ConfigError(f"unknown option {name!r}")
        field_name, validate = entry
        values[field_name] = validate(name, value)
    workers = sum(values.get("worker_queues", {DEFAULT_QUEUE: 4}).values())
    values.setdefault("tx_slots", workers)
    values.setdefault("sweep_interval", min(10.0, max(0.05, values.get("lease_ttl", 30.0) / 3)))
    return ClientConfig(**values)
