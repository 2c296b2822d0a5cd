"""The dashboard's run page of conditional nodes and reruns: a skipped node (its colour, why it was
skipped) and a rerun (the link to the run it reruns, its reused steps)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed")

from starlette.testclient import TestClient

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.ui import create_app

H = "cyclone_test_handlers.conditions"
FLOW = f"""
name: ui-skips
nodes:
  a: {{call: {H}:value}}
  b: {{call: {H}:value, needs: [a], when: "nodes.a.output.go"}}
  c: {{call: {H}:value, needs: [a]}}
"""


def test_run_page_shows_skipped_and_reused_steps(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=2)
    client.start()
    original = client.submit(load_flow_text(FLOW), {"go": False})
    assert client.wait(original, timeout=15).state == "completed"
    http = TestClient(create_app(client), base_url="http://localhost", follow_redirects=False)
    page = http.get(f"/runs/{original}")
    assert page.status_code == 200, page.text
    assert re.search(r'<g class="node state-skipped[^"]*" data-node="b"', page.text)
    assert "skipped: when &#39;nodes.a.output.go&#39; was false (nodes.a.output.go = false)" in (
        page.text
    )
    assert "state-skipped" in page.text and "not run: its when: was false" in page.text

    new_id = client.rerun(original, "c")
    assert client.wait(new_id, timeout=15).state == "completed"
    rerun = http.get(f"/runs/{new_id}")
    assert rerun.status_code == 200, rerun.text
    assert f'data-rerun-of="{original}"' in rerun.text
    assert rerun.text.count('class="reused"') == 2  # a; and b, skipped and reused
