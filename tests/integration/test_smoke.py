from __future__ import annotations

from cyclone_flow.flowfile import load_flow_text

FLOW = """
name: smoke
nodes:
  a:
    call: cyclone_test_handlers.basic:add
    input: {a: "${{ run.input.x }}", b: 1}
  b:
    call: cyclone_test_handlers.basic:add
    needs: [a]
    input: {a: "${{ nodes.a.output.sum }}", b: 10}
"""


def test_two_step_flow_completes(make_client) -> None:
    client = make_client(workers=2)
    run_id = client.submit(load_flow_text(FLOW), {"x": 5})
    client.start()
    status = client.wait(run_id, timeout=20)
    assert status.state == "completed", status
    assert status.output == {"b": {"sum": 16}}
    steps = {s.node: s for s in client.list_steps(run_id)}
    assert steps["a"].output == {"sum": 6}
    assert steps["a"].attempt == 1 and steps["a"].reclaims == 0
