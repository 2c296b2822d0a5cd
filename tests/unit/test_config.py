"""ClientConfig defaults and validation (no database)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cyclone_flow.config import (
    RETENTION_BATCH_SIZE,
    RETENTION_INTERVAL_S,
    ClientConfig,
    PayloadLimits,
    RetentionConfig,
    build_config,
)
from cyclone_flow.errors import ConfigError
from cyclone_flow.logs import DefaultHandler, default_logger

MIB = 1024 * 1024


@pytest.fixture(params=["dataclass", "build_config"])
def default(request: pytest.FixtureRequest) -> ClientConfig:
    return ClientConfig() if request.param == "dataclass" else build_config({})


def test_default_workers(default: ClientConfig) -> None:
    assert dict(default.worker_queues) == {"default": 4}
    assert default.workers == 4


def test_default_tx_slots(default: ClientConfig) -> None:
    assert default.tx_slots == 4
    assert default.pool_min_size == 10


def test_default_lease_and_reclaims(default: ClientConfig) -> None:
    assert default.lease_ttl == 30.0
    assert default.max_reclaims == 0


def test_default_poll_interval_and_notify(default: ClientConfig) -> None:
    assert default.poll_interval == (0.1, 1.0)
    assert default.notify is True
    assert default.notify_coalesce == 0.0


def test_notify_coalesce_accepts_zero_and_seconds() -> None:
    assert build_config({"notify_coalesce": 0}).notify_coalesce == 0.0
    assert build_config({"notify_coalesce": 0.001}).notify_coalesce == 0.001
    assert build_config({"notify_coalesce": 60}).notify_coalesce == 60.0


def test_default_payload_limits(default: ClientConfig) -> None:
    limits = default.payload_limits
    assert (limits.input_bytes, limits.output_bytes, limits.signal_bytes) == (
        MIB,
        MIB,
        256 * 1024,
    )


def test_default_misc(default: ClientConfig) -> None:
    assert default.schema == "public"
    assert default.check_schema is True
    assert isinstance(default.logger, logging.Logger)
    assert default.client_id


def test_default_sweep_interval_from_lease() -> None:
    assert build_config({}).sweep_interval == 10.0
    assert build_config({"lease_ttl": 3}).sweep_interval == pytest.approx(1.0)


def test_workers_sets_default_queue() -> None:
    cfg = build_config({"workers": 7})
    assert dict(cfg.worker_queues) == {"default": 7}
    assert cfg.tx_slots == 7


@pytest.mark.parametrize(
    "options",
    [
        {"worker_queues": {"a": 2, "b": 3}, "schema": "s"},
        {"schema": "s", "worker_queues": {"a": 2, "b": 3}},
        {"lease_ttl": 5, "worker_queues": {"a": 2, "b": 3}, "notify": False},
    ],
)
def test_tx_slots_defaults_to_total_workers_in_any_order(options: dict[str, Any]) -> None:
    assert build_config(options).tx_slots == 5


@pytest.mark.parametrize(
    "options",
    [
        {"tx_slots": 2, "workers": 9},
        {"workers": 9, "tx_slots": 2},
    ],
)
def test_explicit_tx_slots_wins_in_any_order(options: dict[str, Any]) -> None:
    cfg = build_config(options)
    assert cfg.tx_slots == 2
    assert cfg.pool_min_size == 8


def test_workers_then_worker_queues_last_wins() -> None:
    cfg = build_config({"workers": 3, "worker_queues": {"fast": 1, "slow": 2}})
    assert dict(cfg.worker_queues) == {"fast": 1, "slow": 2}
    assert cfg.tx_slots == 3


def test_worker_queues_then_workers_last_wins() -> None:
    cfg = build_config({"worker_queues": {"fast": 1, "slow": 2}, "workers": 6})
    assert dict(cfg.worker_queues) == {"default": 6}
    assert cfg.tx_slots == 6


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"max_reclaims": -1}, "max_reclaims"),
        ({"max_reclaims": 1.5}, "max_reclaims"),
        ({"workers": 0}, "workers"),
        ({"workers": -3}, "workers"),
        ({"workers": True}, "workers"),
        ({"workers": 2.0}, "workers"),
        ({"worker_queues": {}}, "worker_queues"),
        ({"worker_queues": {"Bad Queue": 1}}, "invalid queue name"),
        ({"worker_queues": {"": 1}}, "invalid queue name"),
        ({"worker_queues": {"-lead": 1}}, "invalid queue name"),
        ({"worker_queues": {"x" * 64: 1}}, "invalid queue name"),
        ({"worker_queues": {"ok": 0}}, "worker count"),
        ({"poll_interval": (2.0, 1.0)}, "above max"),
        ({"poll_interval": (0.0, 1.0)}, "poll_interval min"),
        ({"poll_interval": (0.1,)}, "poll_interval"),
        ({"poll_interval": 1.0}, "poll_interval"),
        ({"lease_ttl": 0}, "lease_ttl"),
        ({"lease_ttl": "30s"}, "lease_ttl"),
        ({"tx_slots": 0}, "tx_slots"),
        ({"notify": "yes"}, "notify"),
        ({"notify_coalesce": -0.001}, "notify_coalesce"),
        ({"notify_coalesce": 61}, "notify_coalesce"),
        ({"notify_coalesce": True}, "notify_coalesce"),
        ({"notify_coalesce": "1ms"}, "notify_coalesce"),
        ({"notify_coalesce": float("nan")}, "notify_coalesce"),
        ({"schema": "Bad-Schema"}, "invalid schema name"),
        ({"schema": "1abc"}, "invalid schema name"),
        ({"client_id": "  "}, "client_id"),
        ({"logger": "root"}, "logger"),
        ({"on_step_event": 3}, "on_step_event"),
        ({"payload_limits": {"input_bytes": 1}}, "payload_limits"),
        ({"payload_limits": PayloadLimits(input_bytes=0)}, "payload_limits.input_bytes"),
        ({"sweep_interval": 0}, "sweep_interval"),
        ({"lease_ttl": -1}, "lease_ttl"),
        ({"lease_ttl": float("nan")}, "lease_ttl"),
        ({"lease_ttl": 86_401}, "at most 86400"),
        ({"lease_ttl": True}, "lease_ttl"),
        ({"poll_interval": (0.1, True)}, "poll_interval max"),
        ({"poll_interval": ("0.1", 1.0)}, "poll_interval min"),
        ({"worker_queues": [("a", 1)]}, "worker_queues"),
        ({"worker_queues": {"a": True}}, "worker count"),
        ({"tx_slots": -1}, "tx_slots"),
        ({"tx_slots": 1.5}, "tx_slots"),
        ({"client_id": 7}, "client_id"),
        ({"client_id": ""}, "client_id"),
        ({"client_id": "~limits"}, "reserved"),
        ({"notify": 1}, "notify"),
        ({"logger": logging.LoggerAdapter(logging.getLogger("x"))}, "logger"),
        ({"error_handler": "print"}, "error_handler"),
        ({"payload_limits": PayloadLimits(output_bytes=0)}, "payload_limits.output_bytes"),
        ({"payload_limits": PayloadLimits(signal_bytes=-1)}, "payload_limits.signal_bytes"),
        ({"payload_limits": PayloadLimits(input_bytes=1.5)}, "payload_limits.input_bytes"),
        ({"retention": 3600}, "retention must be a RetentionConfig"),
        ({"retention": {"default_age": 3600}}, "retention must be a RetentionConfig"),
        ({"retention": RetentionConfig(default_age="7d")}, "retention.default_age"),
        ({"retention": RetentionConfig(default_age=float("nan"))}, "retention.default_age"),
        ({"retention": RetentionConfig(3600, batch_size=0)}, "retention.batch_size"),
        ({"retention": RetentionConfig(3600, batch_size=100_001)}, "retention.batch_size"),
        ({"retention": RetentionConfig(3600, interval=0)}, "retention.interval"),
        ({"lease_tll": 30}, "unknown option 'lease_tll'"),
        ({"database": "x"}, "unknown option"),
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, dict) else None,
)
def test_rejected_values_raise_config_error(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_config(options)
    assert needle in str(info.value)
    assert info.value.exit_code == 2
    assert isinstance(info.value, ValueError)


def test_first_bad_option_is_named() -> None:
    with pytest.raises(ConfigError, match="workers"):
        build_config({"workers": 0, "max_reclaims": -1})


def test_valid_edge_values_are_accepted() -> None:
    cfg = build_config(
        {
            "max_reclaims": 0,
            "poll_interval": [0.5, 0.5],
            "worker_queues": {"a.b-c_1": 1, "0x": 63},
            "payload_limits": PayloadLimits(1, 2, 3),
            "logger": None,
        }
    )
    assert cfg.poll_interval == (0.5, 0.5)
    assert cfg.workers == 64
    assert cfg.payload_limits == PayloadLimits(1, 2, 3)


def test_default_retention_is_off(default: ClientConfig) -> None:
    assert default.retention is None
    assert RetentionConfig().enabled is False
    cfg = RetentionConfig()
    assert (cfg.default_age, cfg.batch_size, cfg.interval) == (
        0.0,
        RETENTION_BATCH_SIZE,
        RETENTION_INTERVAL_S,
    )
    assert (RETENTION_BATCH_SIZE, RETENTION_INTERVAL_S) == (100, 60.0)


@pytest.mark.parametrize("age", [0, -1, -3600.5])
def test_non_positive_retention_age_is_accepted_and_disabled(age: float) -> None:
    cfg = build_config({"retention": RetentionConfig(default_age=age)})
    assert cfg.retention is not None and not cfg.retention.enabled


def test_retention_is_kept_and_can_be_turned_off_again() -> None:
    on = RetentionConfig(default_age=7 * 86400, batch_size=10, interval=5)
    assert build_config({"retention": on}).retention == on
    assert on.enabled
    assert build_config({"retention": None}).retention is None


def test_default_logger_is_cyclone_flow_with_a_stderr_handler(default: ClientConfig) -> None:
    logger = default.logger
    assert logger is logging.getLogger("cyclone_flow")
    assert sum(isinstance(h, DefaultHandler) for h in logger.handlers) == 1
    assert logger.level in (logging.INFO, logging.DEBUG)


def test_logger_none_restores_the_default() -> None:
    mine = logging.getLogger("my-app")
    assert build_config({"logger": mine}).logger is mine
    restored = build_config({"logger": None}).logger
    assert restored is default_logger()
    assert sum(isinstance(h, DefaultHandler) for h in restored.handlers) == 1


@pytest.mark.parametrize(
    ("env", "level"),
    [(None, logging.INFO), ("1", logging.DEBUG), ("0", logging.INFO), ("yes", logging.DEBUG)],
)
def test_debug_env_raises_the_default_level(
    monkeypatch: pytest.MonkeyPatch, env: str | None, level: int
) -> None:
    logger = logging.getLogger("cyclone_flow")
    monkeypatch.setattr(logger, "level", logging.NOTSET)  # as in a fresh process
    if env is None:
        monkeypatch.delenv("DEBUG", raising=False)
    else:
        monkeypatch.setenv("DEBUG", env)
    assert default_logger().level == level


def test_default_handler_writes_to_stderr_only_when_nothing_else_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    handler = DefaultHandler()
    alone = logging.getLogger("cyclone_flow_test_alone")
    alone.propagate = False
    record = alone.makeRecord(
        alone.name,
        logging.INFO,
        __file__,
        1,
        "step failed",
        (),
        None,
        extra={"run_id": "r-1", "node": "charge", "attempt": 2},
    )
    handler.handle(record)
    err = capsys.readouterr().err
    assert "INFO cyclone_flow_test_alone: step failed run_id=r-1 node=charge attempt=2" in err

    served = logging.getLogger("cyclone_flow_test_served")
    served.propagate = False
    served.addHandler(logging.NullHandler())
    handler.handle(served.makeRecord(served.name, logging.INFO, __file__, 1, "x", (), None))
    assert capsys.readouterr().err == ""


def test_max_signal_wait_defaults_to_no_cap_and_clamps_negative_to_zero() -> None:
    assert build_config({}).max_signal_wait == 0.0
    assert build_config({"max_signal_wait": 90}).max_signal_wait == 90.0
    assert build_config({"max_signal_wait": -5}).max_signal_wait == 0.0  # no cap


@pytest.mark.parametrize("value", [True, "1h", None, float("nan"), 366 * 86_400 + 1])
def test_max_signal_wait_rejects_non_numbers_and_too_long(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_signal_wait"):
        build_config({"max_signal_wait": value})
