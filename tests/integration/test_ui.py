"""The web dashboard's pages and actions against a real Postgres (starlette's TestClient
drives the ASGI app in process; the Client under it is a real one)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cyclone_test_handlers import ui as handlers
from helpers.procs import wait_until
from markupsafe import escape

pytest.importorskip("starlette", reason="the ui extra is not installed")

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from cyclone_flow import Client, describe
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.ui import app as ui_app
from cyclone_flow.ui import create_app

H = "cyclone_test_handlers.ui"
SHAPES = f"""
name: shapes
nodes:
  first:
    call: {H}:gated
  each:
    type: fan_out
    needs: [first]
    over: "${{{{ run.input.items }}}}"
    call: cyclone_test_handlers.basic:echo
  approve:
    type: wait_signal
    signal: approved
    needs: [each]
  last:
    call: cyclone_test_handlers.basic:echo
    needs: [approve]
"""
FAILING = handlers.FAILING
WAITS = handlers.WAITS
ECHO = """
name: echo
nodes:
  only:
    call: cyclone_test_handlers.basic:echo
"""
BASE = "http://localhost:8080"
"""The TestClient's URL: a loopback name, a Host the app answers without a token."""
XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(2)>']


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    handlers.GATE.clear()
    handlers.FAIL["on"] = True
    yield
    handlers.GATE.set()  # a worker thread still in gated() ends


def _http(client: Client, **options: Any) -> TestClient:
    return TestClient(create_app(client, **options), base_url=BASE, follow_redirects=False)


def _token(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no form token on the page"
    return match.group(1)


def _svg_states(page: str) -> dict[str, str]:
    return dict(re.findall(r'<g class="node[^"]*" data-node="([^"]+)" data-state="([^"]+)"', page))


def test_every_page_renders_a_run_in_flight(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=2)
    run_id = client.submit(load_flow_text(SHAPES), {"items": [1, 2, 3]})
    client.start()
    http = _http(client)
    wait_until(lambda: client.list_steps(run_id)[0].state == "running", timeout=10)

    page = http.get(f"/runs/{run_id}")
    assert page.status_code == 200, page.text
    # every node of the definition, those not started included, coloured by state
    assert _svg_states(page.text) == {
        "first": "running",
        "each": "pending",
        "approve": "pending",
        "last": "pending",
    }
    assert 'hx-trigger="every 1000ms"' in page.text  # live while running
    assert 'data-action="cancel"' in page.text

    handlers.GATE.set()
    wait_until(
        lambda: _svg_states(http.get(f"/runs/{run_id}/live").text)["approve"] == "waiting",
        timeout=20,
    )
    live = http.get(f"/runs/{run_id}/live").text
    states = _svg_states(live)
    assert states["first"] == states["each"] == "completed"
    assert "3/3 done" in live  # the fan-out node: one box with its item counts
    assert "<html" not in live  # a fragment, not a page
    # the timeline: a row per node, a run bar for those that started (items have none)
    timeline = live[live.index('<svg xmlns="http://www.w3.org/2000/svg" class="timeline"') :]
    rows = dict(re.findall(r'<g class="row" data-node="(\w+)" data-state="(\w+)"', timeline))
    assert rows == {
        "first": "completed",
        "each": "completed",
        "approve": "waiting",
        "last": "pending",
    }
    assert timeline.count('class="bar state-completed"') == 2

    step = http.get(f"/runs/{run_id}/steps/approve")
    assert step.status_code == 200
    assert "Why is it not running?" in step.text and "approved" in step.text
    items = http.get(f"/runs/{run_id}/steps/each")
    assert items.status_code == 200 and "Items (3)" in items.text
    item = http.get(f"/runs/{run_id}/steps/each", params={"item": 2})
    assert item.status_code == 200 and "item 2" in item.text
    out = http.get(f"/runs/{run_id}/steps/first/output.json")
    assert out.status_code == 200 and out.json() == {"items": [1, 2, 3]}
    assert "attachment" in out.headers["content-disposition"]
    # the download reads Client.get_step_output, as `cyclone-flow output` does
    every = http.get(f"/runs/{run_id}/steps/each/output.json").json()
    one = http.get(f"/runs/{run_id}/steps/each/output.json", params={"item": 2})
    assert len(every) == 3 and one.status_code == 200 and one.json() == every[2]
    assert http.get(f"/runs/{run_id}/steps/nope/output.json").status_code == 404
    assert http.get(f"/runs/{run_id}/steps/each/output.json?item=7").status_code == 404
    assert http.get(f"/runs/{run_id}/input.json").json() == {"items": [1, 2, 3]}

    overview = http.get("/")
    assert overview.status_code == 200 and "Runs, last hour" in overview.text
    assert "default" in overview.text or "no available" in overview.text
    flows = http.get("/flows")
    assert flows.status_code == 200 and ">shapes</a>" in flows.text
    flow_id = re.search(r'href="/flows/(\d+)"', flows.text)
    assert flow_id
    flow = http.get(f"/flows/{flow_id.group(1)}")
    assert flow.status_code == 200 and "over:" in flow.text
    assert set(_svg_states(flow.text)) == {"first", "each", "approve", "last"}

    for missing in (
        "/runs/00000000-0000-0000-0000-000000000000",
        "/flows/999999",
        f"/runs/{run_id}/steps/nope",
        "/runs/not-a-uuid",
    ):
        assert http.get(missing).status_code == 404, missing
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert http.get("/static/htmx.min.js").status_code == 200


def test_the_step_page_shows_the_last_log_lines_and_says_how_many_are_not(
    make_client: Callable[..., Client], db: Any
) -> None:
    # a running step's newest lines are the ones to see: the old page showed the first
    # 200 lines of 250, and no note of the rest
    client = make_client()
    run_id = client.submit(load_flow_text(ECHO), {}, delay="1h")
    db.execute(
        "INSERT INTO cyclone_step_logs (run_id, node, attempt, generation, seq, at, stream,"
        " level, message) SELECT %s, 'only', 1, 1, i, now(), 'stdout', NULL, 'line ' || i"
        " FROM generate_series(0, 249) AS i ORDER BY i",
        (run_id,),
    )
    page = _http(client).get(f"/runs/{run_id}/steps/only").text
    shown = re.findall(r"stdout: line (\d+)\n", page)
    assert shown == [str(i) for i in range(50, 250)]  # the last 200, oldest first
    assert 'data-log-hidden="50"' in page
    assert (
        f"50 earlier lines not shown; <code>cyclone-flow logs {run_id} --node only</code>"
        " prints them all"
    ) in page
    assert '<div class="log-box"><pre class="log">' in page  # opens scrolled to its end
    # all of them fit: no note
    db.execute("DELETE FROM cyclone_step_logs WHERE run_id = %s AND seq < 100", (run_id,))
    page = _http(client).get(f"/runs/{run_id}/steps/only").text
    assert len(re.findall(r"stdout: line (\d+)\n", page)) == 150
    assert "earlier lines not shown" not in page


def test_why_a_delayed_step_waits(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(ECHO), {}, delay="1h")
    page = _http(client).get(f"/runs/{run_id}/steps/only")
    assert page.status_code == 200
    assert 'data-reason="delayed"' in page.text


def test_why_a_step_given_back_waits(make_client: Callable[..., Client]) -> None:
    # a worker that may not run the call (outside its allow-list) gave it back: the step
    # page and the run's live view say so
    client = make_client(allow_modules=["cyclone_test_handlers.ui"])
    run_id = client.submit(load_flow_text(ECHO), {})
    client.start()
    wait_until(
        lambda: any(s.import_wait_reason for s in client.list_steps(run_id)),
        what="the step given back",
    )
    http = _http(client)
    page = wait_until(
        lambda: (
            (p := http.get(f"/runs/{run_id}/steps/only")).status_code == 200
            and 'data-reason="cannot_import"' in p.text
            and p
        ),
        what="a page of the step available again",
    )
    assert "no live worker may run cyclone_test_handlers.basic:echo" in html.unescape(page.text)
    live = html.unescape(http.get(f"/runs/{run_id}/live").text)
    assert "no live worker may run cyclone_test_handlers.basic:echo" in live


def test_runs_list_filters_search_and_keyset_pages(
    make_client: Callable[..., Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = make_client()
    echo = load_flow_text(ECHO)
    ids = [client.submit(echo, {"n": i}) for i in range(5)]
    keyed = client.submit(load_flow_text(WAITS), {}, unique_key="order-42")
    http = _http(client)
    monkeypatch.setattr(ui_app, "PAGE_SIZE", 2)

    seen: list[str] = []
    url: str | None = "/runs?flow=echo"
    while url is not None:
        page = http.get(url)
        assert page.status_code == 200
        seen += re.findall(r'<tr data-run="([^"]+)"', page.text)
        nxt = re.search(r'href="(/runs\?[^"]+)" rel="next"', page.text)
        url = html.unescape(nxt.group(1)) if nxt else None
    assert seen == list(reversed(ids))  # newest first, each once, no OFFSET

    assert re.findall(r'data-run="([^"]+)"', http.get("/runs?flow=waits").text) == [keyed]
    assert http.get("/runs?state=completed").text.count("<tr data-run=") == 0
    found = http.get("/runs", params={"q": "order-42"})
    assert re.findall(r'data-run="([^"]+)"', found.text) == [keyed]
    assert "unique key 'order-42' (held while running)" in html.unescape(
        http.get(f"/runs/{keyed}").text
    )
    prefix = http.get("/runs", params={"q": keyed[:8]})
    assert prefix.status_code == 303 and prefix.headers["location"] == f"/runs/{keyed}"
    assert http.get("/runs?state=bogus").status_code == 400
    assert http.get("/runs?since=yesterday").status_code == 400
    assert "no runs" in http.get("/runs?since=2999-01-01T00:00").text


BIG_FAN_OUT = """
name: big
nodes:
  each:
    type: fan_out
    over: "${{ run.input.items }}"
    call: cyclone_test_handlers.basic:echo
    queue: nobody-serves-this
"""


def test_a_10000_item_fan_out_pages_its_items_in_sql(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(BIG_FAN_OUT), {"items": list(range(10_000))})
    http = _http(client)
    size = ui_app.ITEMS_PAGE_SIZE
    first = client.reads.list_items(run_id, "each", limit=3)
    assert [s.item_index for s in first] == [0, 1, 2]
    last = client.reads.list_items(run_id, "each", start=9_998)
    assert [s.item_index for s in last] == [9998, 9999]
    assert client.reads.list_items(run_id, "nope") == []

    # the run's page: one box for the fan-out, its link expands the items on the page
    page = http.get(f"/runs/{run_id}")
    assert page.status_code == 200 and len(page.text) < 100_000  # the input: cut at 64 KiB
    assert f'href="/runs/{run_id}?expand=each#items-each"' in page.text
    assert 'hx-trigger="toggle once"' in page.text and 'data-item="' not in page.text
    expanded = http.get(f"/runs/{run_id}", params={"expand": "each"}).text
    rows = re.findall(r'<tr data-item="(\d+)"', expanded)
    assert rows == [str(i) for i in range(size)]
    assert f"page 1 of {10_000 // size}" in expanded

    # the fragment htmx swaps in: keyset pages in item order, next and previous
    frag = http.get(f"/runs/{run_id}/steps/each/items", params={"page": 3})
    assert frag.status_code == 200 and "<html" not in frag.text
    start = 2 * size
    assert re.findall(r'<tr data-item="(\d+)"', frag.text) == [
        str(i) for i in range(start, start + size)
    ]
    assert f'hx-get="/runs/{run_id}/steps/each/items?page=2"' in frag.text
    assert f'hx-get="/runs/{run_id}/steps/each/items?page=4"' in frag.text
    last = http.get(f"/runs/{run_id}/steps/each", params={"page": 10_000 // size})
    assert re.findall(r'<tr data-item="(\d+)"', last.text)[-1] == "9999"
    assert 'rel="next"' not in last.text
    item = http.get(f"/runs/{run_id}/steps/each", params={"item": 9_999})
    assert item.status_code == 200 and "item 9999" in item.text
    assert http.get(f"/runs/{run_id}/steps/each", params={"item": 10_000}).status_code == 404
    # page 0, -1 and one past the end: the same message
    for bad in ("0", "-1", str(10_000 // size + 1), "x"):
        for url in (f"/runs/{run_id}/steps/each", f"/runs/{run_id}/steps/each/items"):
            refused = http.get(url, params={"page": bad})
            assert refused.status_code == 400, (url, bad)
            assert f"page must be a whole number from 1 to {10_000 // size}" in refused.text


def test_overview_throughput_per_queue(make_client: Callable[..., Client], db: Any) -> None:
    client = make_client(workers=1)
    echo = load_flow_text(ECHO)
    done = [client.submit(echo, {}) for _ in range(3)]
    gated = client.submit(
        load_flow_text(
            f"name: two\nnodes:\n  a: {{call: cyclone_test_handlers.basic:echo}}\n"
            f"  b: {{call: '{H}:gated', needs: [a]}}\n"
        ),
        {},
    )
    client.start()
    for run_id in done:
        assert client.wait(run_id, timeout=20).state == "completed"
    # a running run's finished step counts too (found through its running step)
    wait_until(lambda: [s.state for s in client.list_steps(gated)] == ["completed", "running"])
    assert [(t.queue, t.last_minute, t.last_hour) for t in client.reads.queue_throughput()] == [
        ("default", 4, 4)
    ]
    db.execute(
        "UPDATE cyclone_steps SET finished_at = now() - interval '10 minutes' WHERE run_id = %s",
        [done[0]],
    )
    db.execute(
        "UPDATE cyclone_steps SET finished_at = now() - interval '2 hours' WHERE run_id = %s",
        [done[1]],
    )
    assert [(t.queue, t.last_minute, t.last_hour) for t in client.reads.queue_throughput()] == [
        ("default", 2, 3)
    ]
    assert client.reads.queue_throughput(cap=1)[0].last_hour == 1
    page = _http(client).get("/").text
    row = re.search(r'<tr data-queue="default">(.*?)</tr>', page, re.S)
    assert row, page
    assert '<td class="done-minute">2</td><td class="done-hour">3</td>' in row.group(1)
    handlers.GATE.set()
    assert client.wait(gated, timeout=20).state == "completed"


def test_reclaimed_steps_running_and_at_a_queue_head(
    make_client: Callable[..., Client], db: Any
) -> None:
    client = make_client()
    echo = load_flow_text(ECHO)
    ids = [client.submit(echo, {}) for _ in range(4)]
    db.execute("UPDATE cyclone_steps SET reclaims = 2 WHERE run_id = %s", [ids[0]])
    db.execute(
        "UPDATE cyclone_steps SET state = 'running', lease_owner = 'gone',"
        " lease_expiry = now() + interval '1 hour', reclaims = 3 WHERE run_id = %s",
        [ids[1]],
    )
    db.execute("UPDATE cyclone_steps SET reclaims = 1 WHERE run_id = %s", [ids[2]])
    found = [(r.run_id, r.reclaims) for r in client.reads.list_reclaimed_steps()]
    assert found == [(ids[1], 3), (ids[0], 2)]  # more than once, most first
    assert "step only reclaimed 2 times (available)" in _http(client).get("/").text


def test_cosmetics_took_units_flow_yaml_note(make_client: Callable[..., Client]) -> None:
    assert describe.duration(_at(0), _at(0.25)) == "250 ms"
    assert describe.duration(_at(0), _at(12.34)) == "12.3 s"
    assert describe.duration(_at(0), _at(245)) == "4 min 05 s"
    assert describe.duration(_at(0), _at(7380)) == "2 h 03 min"
    assert describe.duration(_at(0), _at(3 * 86400 + 4 * 3600)) == "3 d 04 h"
    client = make_client()
    client.submit(load_flow_text(ECHO), {})
    http = _http(client)
    assert "took (created → finished)" in http.get("/runs").text
    flows = http.get("/flows").text
    flow_id = re.search(r'href="/flows/(\d+)"', flows)
    assert flow_id
    assert "re-serialised as YAML" in http.get(f"/flows/{flow_id.group(1)}").text


def _at(seconds: float) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def test_cancel_needs_a_confirmation_and_the_form_token(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(WAITS), {})
    http = _http(client)
    token = _token(http.get(f"/runs/{run_id}").text)

    assert http.post(f"/runs/{run_id}/cancel", data={}).status_code == 403
    assert http.post(f"/runs/{run_id}/cancel", data={"csrf": "x" * 43}).status_code == 403
    cross = {"Origin": "https://evil.example"}
    assert (
        http.post(f"/runs/{run_id}/cancel", data={"csrf": token}, headers=cross).status_code == 403
    )
    site = {"Sec-Fetch-Site": "cross-site"}
    assert (
        http.post(f"/runs/{run_id}/cancel", data={"csrf": token}, headers=site).status_code == 403
    )
    assert client.get_run(run_id).state == "running"

    ask = http.post(f"/runs/{run_id}/cancel", data={"csrf": token})
    assert ask.status_code == 200 and "Really cancel run" in ask.text
    assert client.get_run(run_id).state == "running"  # nothing done before the answer
    same = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
    done = http.post(f"/runs/{run_id}/cancel", data={"csrf": token, "confirmed": "1"}, headers=same)
    assert done.status_code == 303 and done.headers["location"].startswith(f"/runs/{run_id}?msg=")
    assert client.get_run(run_id).state == "cancelled"
    # a refused cancel is a 409 with its reason, as a refused retry or signal is
    again = http.post(f"/runs/{run_id}/cancel", data={"csrf": token, "confirmed": "1"})
    assert again.status_code == 409 and "already finished" in again.text
    assert "location" not in again.headers
    # nothing to confirm for what does not exist: 404 at once
    missing = http.post("/runs/0a0a0a0a-0000-4000-8000-000000000000/cancel", data={"csrf": token})
    assert missing.status_code == 404 and "Really" not in missing.text
    nope = http.post("/schedules/nope/pause", data={"csrf": token})
    assert nope.status_code == 404 and "Really" not in nope.text


def test_retry_a_failed_run_and_a_node(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(FAILING), {})
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    http = _http(client)
    page = http.get(f"/runs/{run_id}").text
    assert 'data-action="retry"' in page and 'data-action="retry-node"' in page
    assert "failing on purpose" in page
    token = _token(page)

    handlers.FAIL["on"] = False
    r = http.post(f"/runs/{run_id}/retry", data={"csrf": token, "node": "a"})
    assert r.status_code == 303, r.text
    assert client.wait(run_id, timeout=20).state == "completed"
    # a retry of a completed run is refused with the Client's message, not a traceback
    refused = http.post(f"/runs/{run_id}/retry", data={"csrf": token})
    assert refused.status_code == 409 and "only failed or cancelled" in refused.text


def test_signal_a_waiting_run_with_a_json_payload(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(WAITS), {})
    client.start()
    http = _http(client)
    token = _token(http.get(f"/runs/{run_id}").text)
    bad = http.post(f"/runs/{run_id}/signal", data={"csrf": token, "name": "go", "payload": "{"})
    assert bad.status_code == 400 and "not JSON" in bad.text
    wrong = http.post(f"/runs/{run_id}/signal", data={"csrf": token, "name": "nope"})
    assert wrong.status_code == 409
    big = http.post(
        f"/runs/{run_id}/signal",
        data={"csrf": token, "name": "go", "payload": '"' + "x" * 300_000 + '"'},
    )
    assert big.status_code == 400 and "over the limit" in big.text  # the Client's limit
    ok = http.post(
        f"/runs/{run_id}/signal", data={"csrf": token, "name": "go", "payload": '{"by": "ada"}'}
    )
    assert ok.status_code == 303 and "consumed" in ok.headers["location"]
    assert client.wait(run_id, timeout=20).state == "completed"
    approve = next(s for s in client.list_steps(run_id) if s.node == "approve")
    assert approve.output == {"by": "ada"}


def test_bulk_cancel_and_schedule_pause_resume(make_client: Callable[..., Client]) -> None:
    client = make_client()
    waits = load_flow_text(WAITS)
    ids = [client.submit(waits, {}) for _ in range(3)]
    client.add_schedule(load_flow_text(ECHO), "*/5 * * * *", name="every5")
    http = _http(client)
    token = _token(http.get("/runs").text)
    data = {"csrf": token, "action": "cancel", "run_id": ids[:2]}
    assert "Really cancel 2 run(s)" in http.post("/actions/bulk", data=data).text
    done = http.post("/actions/bulk", data={**data, "confirmed": "1"})
    assert done.status_code == 303
    assert [client.get_run(i).state for i in ids] == ["cancelled", "cancelled", "running"]

    assert 'data-action="pause"' in http.get("/").text
    ask = http.post("/schedules/every5/pause", data={"csrf": token})
    assert "Really pause schedule" in ask.text
    http.post("/schedules/every5/pause", data={"csrf": token, "confirmed": "1"})
    assert client.get_schedule("every5").paused  # type: ignore[union-attr]
    http.post("/schedules/every5/resume", data={"csrf": token})
    assert not client.get_schedule("every5").paused  # type: ignore[union-attr]
    missing = http.post("/schedules/nope/resume", data={"csrf": token})
    assert missing.status_code == 404


def test_trigger_a_schedule_from_the_overview(make_client: Callable[..., Client]) -> None:
    client = make_client()
    client.add_schedule(load_flow_text(ECHO), "0 0 1 1 *", input={"n": 7}, name="yearly")
    http = _http(client)
    overview = http.get("/").text
    assert 'action="/schedules/yearly/trigger"' in overview and 'data-action="trigger"' in overview
    token = _token(overview)
    assert http.post("/schedules/yearly/trigger", data={}).status_code == 403
    ask = http.post("/schedules/yearly/trigger", data={"csrf": token})
    assert ask.status_code == 200 and "Really submit a run of schedule" in ask.text
    assert client.reads.list_runs_page(limit=5) == []  # nothing before the answer
    done = http.post("/schedules/yearly/trigger", data={"csrf": token, "confirmed": "1"})
    assert done.status_code == 303
    (run,) = client.reads.list_runs_page(limit=5)
    assert done.headers["location"].startswith(f"/runs/{run.id}?msg=")
    assert run.input == {"n": 7}
    assert "triggered from its schedule" in http.get(f"/runs/{run.id}").text
    assert client.get_schedule("yearly").last_run_id == run.id  # type: ignore[union-attr]
    missing = http.post("/schedules/nope/trigger", data={"csrf": token})
    assert missing.status_code == 404 and "Really" not in missing.text


def test_read_only_has_no_action_at_all(make_client: Callable[..., Client]) -> None:
    client = make_client(workers=1)
    failed = client.submit(load_flow_text(FAILING), {})
    waiting = client.submit(load_flow_text(WAITS), {})
    client.add_schedule(load_flow_text(ECHO), "*/5 * * * *", name="every5")
    client.start()
    assert client.wait(failed, timeout=20).state == "failed"
    http = _http(client, read_only=True)
    for url in (f"/runs/{failed}", f"/runs/{waiting}", "/runs", "/"):
        page = http.get(url)
        assert page.status_code == 200
        assert "data-action=" not in page.text and 'method="post"' not in page.text, url
        assert 'name="csrf"' not in page.text
    for url in (
        f"/runs/{failed}/retry",
        f"/runs/{waiting}/cancel",
        f"/runs/{waiting}/signal",
        "/actions/bulk",
        "/schedules/every5/pause",
        "/schedules/every5/trigger",
        "/anything",
    ):
        assert http.post(url, data={"confirmed": "1"}).status_code == 405, url
    assert client.get_run(failed).state == "failed"
    assert client.get_run(waiting).state == "running"


def test_markup_in_outputs_and_errors_renders_as_text(make_client: Callable[..., Client]) -> None:
    flow = f"""
name: xss
nodes:
  out:
    call: {H}:markup_output
  err:
    call: {H}:markup_error
    needs: [out]
"""
    client = make_client(workers=1)
    runs = [client.submit(load_flow_text(flow), {"markup": m}) for m in XSS]
    client.start()
    http = _http(client)
    for run_id, markup in zip(runs, XSS, strict=True):
        assert client.wait(run_id, timeout=20).state == "failed"
        pages = [
            http.get(f"/runs/{run_id}").text,
            http.get(f"/runs/{run_id}/steps/out").text,
            http.get(f"/runs/{run_id}/steps/err").text,
            http.get("/runs").text,
        ]
        for page in pages:
            assert markup not in page
            assert "<script>alert" not in page and "<img src=x" not in page
        # shown, as text: in the output's JSON (a quote there is \") and in the error
        assert str(escape(markup.lstrip('"'))) in pages[1]
        assert str(escape(markup)) in pages[2]


def test_authentication_token(make_client: Callable[..., Client]) -> None:
    client = make_client()
    http = _http(client, auth_token="s3cret")
    assert http.get("/").status_code == 401
    assert http.get("/").headers["www-authenticate"].startswith("Basic")
    good = base64.b64encode(b"anyone:s3cret").decode()
    bad = base64.b64encode(b"anyone:wrong").decode()
    assert http.get("/", headers={"Authorization": f"Basic {good}"}).status_code == 200
    assert http.get("/", headers={"Authorization": f"Basic {bad}"}).status_code == 401
    assert http.get("/", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert http.get("/", headers={"Authorization": "Basic !!"}).status_code == 401


def test_mounted_under_a_path_links_stay_inside(make_client: Callable[..., Client]) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(ECHO), {})
    outer = Starlette(routes=[Mount("/ops/flows-ui", app=create_app(client))])
    http = TestClient(outer, base_url=BASE, follow_redirects=False)
    page = http.get(f"/ops/flows-ui/runs/{run_id}")
    assert page.status_code == 200
    assert 'href="/ops/flows-ui/static/ui.css"' in page.text
    assert f'href="/ops/flows-ui/runs/{run_id}/steps/only"' in page.text
    found = http.get("/ops/flows-ui/runs", params={"q": run_id[:8]})
    assert found.headers["location"] == f"/ops/flows-ui/runs/{run_id}"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_cli_refuses_a_public_host_without_a_token() -> None:
    from helpers.cli import no_traceback, run_cli

    proc = run_cli("ui", "--host", "0.0.0.0", "--database-url", "postgresql://nowhere/x")
    assert proc.returncode == 2, proc.stderr
    assert "CYCLONE_UI_TOKEN" in proc.stderr and "--no-auth" in proc.stderr
    no_traceback(proc)


def test_cli_checks_trusted_hosts() -> None:
    from helpers.cli import clean_env, no_traceback, run_cli

    url = ("--database-url", "postgresql://nowhere/x")
    bad = run_cli("ui", "--trusted-host", "a/b", *url)
    assert bad.returncode == 2 and "trusted host 'a/b'" in bad.stderr, bad.stderr
    port = run_cli("ui", "--trusted-host", "flows.example:99999", *url)
    assert port.returncode == 2 and "port must be a number" in port.stderr, port.stderr
    for malformed in ("[::1", "x:80:80"):  # the old check kept one, bracketed the other
        proc = run_cli("ui", "--trusted-host", malformed, *url)
        assert proc.returncode == 2 and f"trusted host '{malformed}'" in proc.stderr, proc.stderr
        no_traceback(proc)
    # any host without a token: a page that rebinds its name to 127.0.0.1 could act
    anyone = run_cli("ui", *url, env=clean_env(CYCLONE_UI_TRUSTED_HOSTS="flows.example, *"))
    assert anyone.returncode == 2 and "needs CYCLONE_UI_TOKEN" in anyone.stderr, anyone.stderr
    for proc in (bad, port, anyone):
        no_traceback(proc)


def test_a_body_over_the_limit_is_refused_before_its_token(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(WAITS), {})
    http = _http(client)
    big = http.post(f"/runs/{run_id}/cancel", content=b"a=" + b"x" * ui_app.MAX_BODY_BYTES)
    assert big.status_code == 413 and big.text == "request body over 1048576 bytes\n"
    assert big.headers["x-frame-options"] == "DENY"  # the security headers all the same
    assert client.get_run(run_id).state == "running"


def test_cli_serves_the_dashboard(database_url: str, schema: str) -> None:
    import subprocess
    import urllib.request

    from helpers.cli import clean_env
    from helpers.paths import CLI

    port = _free_port()
    proc = subprocess.Popen(
        [
            str(CLI),
            "ui",
            "--port",
            str(port),
            "--read-only",
            "--database-url",
            database_url,
            "--schema",
            schema,
        ],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def up() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=2) as r:
                    return r.status == 200 and b"Runs" in r.read()
            except OSError:
                assert proc.poll() is None, proc.communicate()
                return False

        wait_until(up, timeout=30)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/runs", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 405
        refused.value.close()
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=20)
    assert "dashboard on http://127.0.0.1" in err and "read-only" in err
    assert "Traceback" not in err
