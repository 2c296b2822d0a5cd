"""The facts about a flow's nodes the insert path asks at every submission, as ``Flow``
properties: ``has_limits``, ``roots_are_actions``, ``root_queues``."""

from __future__ import annotations

from cyclone_flow.flowfile import load_flow_text

PLAIN = """
name: plain
nodes:
  a:
    call: m:f
    queue: fast
  b:
    call: m:f
  c:
    call: m:f
    needs: [a]
    queue: late
"""

MIXED = """
name: mixed
nodes:
  a:
    call: m:f
    concurrency: {limit: 2}
  gate:
    type: wait_signal
    signal: go
  maybe:
    call: m:f
    when: ${{ run.input.go }}
"""


def test_facts_of_a_flow_of_root_actions() -> None:
    flow = load_flow_text(PLAIN)
    assert not flow.has_limits
    assert flow.roots_are_actions
    assert flow.root_queues() == {"fast", "default"}
    assert flow.root_queues("other") == {"fast", "other"}  # a: sets its own queue


def test_facts_of_a_flow_with_limits_and_other_roots() -> None:
    flow = load_flow_text(MIXED)
    assert flow.has_limits
    assert not flow.roots_are_actions
    assert flow.root_queues() == {"default"}  # neither the signal wait nor the when: node
    assert flow.has_limits is flow.has_limits  # computed once (a cached property)
