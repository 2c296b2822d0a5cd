"""Metrics of the nodes the engine decides: a fan-out node's roll-up is
counted on its node's queue, never under ``queue="unknown"``; an item's dead letter is
counted once (the fan-out node's ``item_failed`` is not a second one); no ``_created``
series are served."""

from __future__ import annotations

from collections.abc import Callable

from helpers.procs import wait_until
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cyclone_flow import Client, StepEvent
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.metrics import Metrics

FAN_OUT = load_flow_text(
    """
name: m_fan
nodes:
  each:
    type: fan_out
    queue: fanq
    over: "${{ run.input.items }}"
    call: cyclone_test_handlers.node_types:fail_on
    input: {value: "${{ item }}", bad: "${{ run.input.bad }}"}
"""
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(metrics: Metrics) -> tuple[str, Samples]:
    text = generate_latest(metrics.registry).decode("utf-8")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return text, samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_fan_out_roll_ups_are_counted_on_the_nodes_queue_and_once_as_dead_letters(
    make_client: Callable[..., Client],
) -> None:
    metrics = Metrics()
    events: list[StepEvent] = []
    client = make_client(worker_queues={"fanq": 2})
    client.observe_steps(metrics.observe)
    client.observe_steps(events.append)  # after metrics: seen here means counted there

    def node_event(run_id: str, kind: str) -> bool:
        return any(e.run_id == run_id and e.node == "each" and e.kind == kind for e in events)

    client.start()
    ok = client.submit(FAN_OUT, {"items": [0, 1, 2], "bad": -1})
    assert client.wait(ok, timeout=20).state == "completed"
    wait_until(lambda: node_event(ok, "completed"), what="the fan-out node's completion event")
    (rollup,) = [e for e in events if e.run_id == ok and e.node == "each"]
    assert rollup.queue == "fanq"  # the engine's event says the node's queue
    _, samples = _samples(metrics)
    done = "cyclone_steps_completed_total"
    assert _value(samples, done, queue="fanq") == 4  # 3 items + the fan-out node
    assert _value(samples, done, queue="unknown") == 0

    bad = client.submit(FAN_OUT, {"items": [0, 1, 2], "bad": 1})
    assert client.wait(bad, timeout=20).state == "failed"
    wait_until(lambda: node_event(bad, "discarded"), what="the fan-out node's discard event")
    text, samples = _samples(metrics)
    discarded = "cyclone_steps_discarded_total"
    assert _value(samples, discarded, queue="fanq", error_kind="handler_error") == 1
    dead = {k: v for k, v in samples.items() if k[0] == discarded}
    assert sum(dead.values()) == 1, dead  # one failed item, one dead letter
    failed = {k: v for k, v in samples.items() if k[0] == "cyclone_steps_failed_total"}
    assert sum(failed.values()) == 1, failed  # one failed attempt
    unknown = [k for k in samples if ("queue", "unknown") in k[1]]
    assert unknown == []
    assert "_created" not in text
