"""``cyclone-flow worker --metrics-port``: a real worker process serves Prometheus
metrics: step counters by queue, handler duration and claim-to-start histograms, and queue
gauges read from the database (Client Options: Observability)."""

from __future__ import annotations

import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.procs import WorkerProcess, wait_until
from prometheus_client.parser import text_string_to_metric_families

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

OPS = "cyclone_test_handlers.ops"
OK = load_flow_text("name: m_ok\nnodes:\n  s: {call: 'cyclone_test_handlers.basic:echo'}\n")
FLAKY = load_flow_text(
    f"""
name: m_flaky
nodes:
  s:
    call: {OPS}:flaky
    retry: {{max_attempts: 2, backoff: {{initial: 0s}}}}
"""
)
FAILS = load_flow_text(f"name: m_fails\nnodes:\n  s: {{call: '{OPS}:always_fails'}}\n")
PARKED = load_flow_text("name: m_parked\nnodes:\n  s: {call: 'm:f', queue: parked}\n")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def _get(samples: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no series {name}{labels}; have {sorted(k[0] for k in samples)}"
    return samples[key]


def test_worker_serves_the_named_series(
    make_client: Callable[..., Client],
    db: Any,
    database_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    port = _free_port()
    worker = WorkerProcess(
        database_url,
        schema,
        tmp_path / "worker.log",
        workers=2,
        lease_ttl="5s",
        extra_args=["--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
    )
    try:
        submitter = make_client()
        parked = submitter.submit(PARKED)
        runs = [submitter.submit(f, {"succeed_on": 2}) for f in (OK, FLAKY, FAILS)]
        wait_until(
            lambda: all(submitter.get_run(r).state.terminal for r in runs),
            timeout=60,
            what="the three runs to finish",
        )
        assert [submitter.get_run(r).state for r in runs] == ["completed", "completed", "failed"]

        samples = _scrape(port)
        q = {"queue": "default"}
        assert _get(samples, "cyclone_steps_claimed_total", **q) == 4  # ok, flaky x2, fails
        assert _get(samples, "cyclone_steps_completed_total", **q) == 2
        assert _get(samples, "cyclone_steps_retried_total", **q) == 1
        assert _get(samples, "cyclone_steps_failed_total", error_kind="handler_error", **q) == 2
        assert _get(samples, "cyclone_steps_discarded_total", error_kind="handler_error", **q) == 1
        assert _get(samples, "cyclone_step_handler_duration_seconds_count", **q) == 4
        assert _get(samples, "cyclone_step_handler_duration_seconds_sum", **q) > 0
        assert _get(samples, "cyclone_step_start_latency_seconds_count", **q) == 4
        # gauges from the database: the served queue is empty, the parked one waits
        assert _get(samples, "cyclone_queue_available_steps", **q) == 0
        assert _get(samples, "cyclone_queue_running_steps", **q) == 0
        assert _get(samples, "cyclone_queue_available_steps", queue="parked") == 1
        assert _get(samples, "cyclone_queue_oldest_available_age_seconds", queue="parked") > 0
        assert [s.state for s in submitter.list_steps(parked)] == ["available"]

        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.log()
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            _scrape(port)
    finally:
        worker.kill()


def test_metrics_port_in_use_is_a_clear_error(
    database_url: str, schema: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = WorkerProcess(
            database_url,
            schema,
            tmp_path / "worker.log",
            extra_args=["--metrics-port", str(port), "--metrics-addr", "127.0.0.1"],
        )
        assert worker.wait() == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in worker.log()
    assert "Traceback" not in worker.log()
