"""The dashboard in a real browser: Debian's chromium (``/usr/bin/chromium``) driven by
Playwright pointed at it (no browser download), against the app served by uvicorn on a
free port over a real Client and Postgres.

Skipped with the reason when chromium or playwright is missing, except under
``CYCLONE_REQUIRE_CHROMIUM=1`` (CI: ``.ci/run`` installs chromium), where that fails.
Screenshots go to the test's tmp dir (``pytest --basetemp`` keeps them)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers import ui as handlers

from cyclone_flow import Client
from cyclone_flow.flowfile import load_flow_text

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000
"""How long a browser wait may take (the worker runs each step in milliseconds)."""

H = "cyclone_test_handlers.ui"
LIVE = f"""
name: live
nodes:
  fetch:
    call: {H}:gated
  parse:
    call: cyclone_test_handlers.basic:echo
    needs: [fetch]
  each:
    type: fan_out
    needs: [parse]
    over: "${{{{ run.input.items }}}}"
    call: cyclone_test_handlers.basic:echo
  report:
    call: cyclone_test_handlers.basic:echo
    needs: [each]
  notify:
    call: cyclone_test_handlers.basic:echo
    needs: [parse]
"""
FAILING = handlers.FAILING
WAITS = handlers.WAITS


def _unavailable(reason: str) -> None:
    if os.environ.get("CYCLONE_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"CYCLONE_REQUIRE_CHROMIUM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for the module."""
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    pytest.importorskip("uvicorn", reason="the ui extra is not installed")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    handlers.GATE.clear()
    handlers.FAIL["on"] = True
    yield
    handlers.GATE.set()


@contextmanager
def serve(client: Client, **options: Any) -> Iterator[str]:
    """The dashboard of ``client`` served by uvicorn in a thread; yields its base URL."""
    import uvicorn

    from cyclone_flow.ui import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(client, **options), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        from helpers.procs import wait_until

        wait_until(lambda: server.started, timeout=10, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    try:
        yield tab
    finally:
        context.close()


def _node(tab: Any, name: str, state: str) -> Any:
    return tab.wait_for_selector(f'svg.dag g[data-node="{name}"][data-state="{state}"]')


def test_runs_list(make_client: Callable[..., Client], page: Any, tmp_path: Path) -> None:
    client = make_client(workers=2)
    ids = [client.submit(load_flow_text(WAITS), {}) for _ in range(3)]
    with serve(client) as url:
        page.goto(f"{url}/runs")
        rows = page.locator("table.runs tbody tr[data-run]")
        assert rows.count() == 3
        assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.run)")) == set(ids)
        page.screenshot(path=str(tmp_path / "ui-runs.png"), full_page=True)
        page.click(f'tr[data-run="{ids[0]}"] a')
        page.wait_for_url(f"{url}/runs/{ids[0]}")
        _node(page, "approve", "waiting")


def test_run_turns_completed_live_without_a_reload(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=3)
    run_id = client.submit(load_flow_text(LIVE), {"items": list(range(12))})
    client.start()
    with serve(client, poll_interval_s=0.3) as url:
        page.goto(f"{url}/runs/{run_id}")
        _node(page, "fetch", "running")
        _node(page, "report", "pending")  # not started yet, drawn all the same
        page.screenshot(path=str(tmp_path / "ui-run-running.png"), full_page=True)
        page.evaluate("window.__same_document = true")
        handlers.GATE.set()
        for node in ("fetch", "parse", "each", "notify", "report"):
            _node(page, node, "completed")
        page.wait_for_selector('#live[data-run-state="completed"]')
        # the same document all along: htmx swapped the fragment, nothing reloaded
        assert page.evaluate("window.__same_document") is True
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
        assert "12/12 done" in page.text_content("svg.dag")
        page.screenshot(path=str(tmp_path / "ui-run.png"), full_page=True)


def test_retry_a_failed_run_from_its_page(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(FAILING), {})
    client.start()
    assert client.wait(run_id, timeout=20).state == "failed"
    with serve(client, poll_interval_s=0.3) as url:
        page.goto(f"{url}/runs/{run_id}")
        _node(page, "a", "discarded")
        assert "failing on purpose" in page.inner_text("#live")
        handlers.FAIL["on"] = False
        page.click('button[data-action="retry"]')
        page.wait_for_selector('#live[data-run-state="completed"]')
        _node(page, "b", "completed")
        assert "retried: a, b" in page.inner_text(".flash")
        page.screenshot(path=str(tmp_path / "ui-retried.png"), full_page=True)
    assert client.get_run(run_id).state == "completed"


def test_signal_a_waiting_run(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(WAITS), {})
    client.start()
    with serve(client, poll_interval_s=0.3) as url:
        page.goto(f"{url}/runs/{run_id}")
        _node(page, "approve", "waiting")
        assert page.input_value('form.signal input[name="name"]') == "go"  # the awaited one
        page.fill('form.signal input[name="payload"]', '{"by": "browser"}')
        # the fragment refreshes under the form: what was typed must survive a refresh
        page.evaluate(
            "() => new Promise(done => document.body.addEventListener("
            "'htmx:afterSettle', () => done(), {once: true}))"
        )
        assert page.input_value('form.signal input[name="payload"]') == '{"by": "browser"}'
        page.click('button[data-action="signal"]')
        page.wait_for_selector('#live[data-run-state="completed"]')
        page.screenshot(path=str(tmp_path / "ui-signalled.png"), full_page=True)
    approve = next(s for s in client.list_steps(run_id) if s.node == "approve")
    assert approve.output == {"by": "browser"}


def test_read_only_shows_no_action(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    failed = client.submit(load_flow_text(FAILING), {})
    waiting = client.submit(load_flow_text(WAITS), {})
    client.start()
    assert client.wait(failed, timeout=20).state == "failed"
    with serve(client, read_only=True) as url:
        for path in (f"/runs/{failed}", f"/runs/{waiting}", "/runs", "/"):
            page.goto(f"{url}{path}")
            assert page.locator("[data-action]").count() == 0, path
            assert page.locator('form[method="post"]').count() == 0, path
        page.screenshot(path=str(tmp_path / "ui-read-only.png"), full_page=True)


def _wide_flow(width: int, depth: int) -> str:
    """A flow of ``width * depth`` nodes, each level needing two nodes of the one before."""
    lines = [f"name: wide{width}x{depth}", "nodes:"]
    for level in range(depth):
        for i in range(width):
            lines += [f"  n{level}_{i}:", "    call: cyclone_test_handlers.basic:echo"]
            if level:
                lines.append(f"    needs: [n{level - 1}_{i}, n{level - 1}_{(i + 1) % width}]")
    return "\n".join(lines) + "\n"


def test_a_2000_node_run_renders_and_stays_live(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(_wide_flow(50, 40)), {})  # no worker: it waits
    with serve(client, poll_interval_s=0.3) as url:
        page.goto(f"{url}/runs/{run_id}")
        page.wait_for_selector('svg.dag g[data-node="n39_49"]')
        assert page.locator("svg.dag g.node").count() == 2000
        assert page.locator('svg.dag g.node[data-state="available"]').count() == 50
        assert "the first 300 of 2000 steps" in page.inner_text("#live")
        assert page.locator("table.steps tbody tr").count() == 300
        # a big run's live part is fetched again, not back to back, and swapped in place
        live_ms = int(page.get_attribute("#live", "hx-trigger").split()[1].removesuffix("ms"))
        assert live_ms >= 300
        page.evaluate("window.__same_document = true")
        page.evaluate(
            "() => new Promise(done => document.body.addEventListener("
            "'htmx:afterSettle', () => done(), {once: true}))"
        )
        assert page.evaluate("window.__same_document") is True
        assert page.locator("svg.dag g.node").count() == 2000
        page.screenshot(path=str(tmp_path / "ui-2000-nodes.png"))


def test_a_10000_item_fan_out_renders(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    flow = load_flow_text(
        "name: many_items\nnodes:\n  each:\n    type: fan_out\n"
        '    over: "${{ run.input.items }}"\n    call: cyclone_test_handlers.basic:echo\n'
    )
    run_id = client.submit(flow, {"items": list(range(10_000))})  # a root: started at once
    with serve(client, poll_interval_s=0.3) as url:
        page.goto(f"{url}/runs/{run_id}")
        box = page.wait_for_selector('svg.dag g[data-node="each"]')
        assert "of 10000" in box.text_content() or "/10000" in box.text_content()
        page.goto(f"{url}/runs/{run_id}/steps/each")
        assert "Items (10000)" in page.inner_text("main")
        page.screenshot(path=str(tmp_path / "ui-10000-items.png"))


BIG = """
name: big
nodes:
  split:
    call: cyclone_test_handlers.basic:echo
  each:
    type: fan_out
    needs: [split]
    over: "${{ nodes.split.output.items }}"
    call: cyclone_test_handlers.basic:echo
    queue: nobody-serves-this
  report:
    call: cyclone_test_handlers.basic:echo
    needs: [each]
"""


def test_a_10000_item_fan_out_box_expands_inline(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    run_id = client.submit(load_flow_text(BIG), {"items": list(range(10_000))})
    client.add_schedule(load_flow_text(BIG), "0 3 * * *", name="nightly-big", input={"items": []})
    client.start()
    from helpers.procs import wait_until

    each = lambda: next(s for s in client.list_steps(run_id, items=False) if s.node == "each")  # noqa: E731
    wait_until(lambda: each().items_total == 10_000, timeout=30, what="the items")
    with serve(client, poll_interval_s=0.5) as url:
        page.goto(f"{url}/")
        page.wait_for_selector('tr[data-queue="default"]')
        assert page.locator('button[data-action="trigger"]').count() == 1
        page.screenshot(path=str(tmp_path / "ui-overview.png"), full_page=True)
        page.goto(f"{url}/runs/{run_id}")
        _node(page, "each", "waiting")
        page.evaluate("window.__same_document = true")
        page.click('svg.dag g[data-node="each"]')  # the box: its items fold out on the page
        page.wait_for_selector('details#items-each[open] tr[data-item="49"]')
        assert page.locator("details#items-each tr[data-item]").count() == 50
        page.click('details#items-each a[rel="next"]')  # htmx swaps the next page in place
        page.wait_for_selector('details#items-each tr[data-item="99"]')
        assert page.locator('details#items-each tr[data-item="0"]').count() == 0
        page.click('details#items-each a[rel="prev"]')
        page.wait_for_selector('details#items-each tr[data-item="0"]')
        page.screenshot(path=str(tmp_path / "ui-run-fan-out.png"), full_page=True)
        # folded out by a click on the summary too, after a plain load of the page
        page.goto(f"{url}/runs/{run_id}")
        page.evaluate("window.__same_document = true")
        page.click("details#items-each summary")
        page.wait_for_selector('details#items-each tr[data-item="49"]')
        assert page.evaluate("window.__same_document") is True  # htmx, no navigation


RERUN = """
name: ui-reruns
nodes:
  a: {call: cyclone_test_handlers.conditions:value}
  b: {call: cyclone_test_handlers.conditions:value, needs: [a], when: "nodes.a.output.go"}
  c: {call: cyclone_test_handlers.conditions:value, needs: [a]}
"""

ONE = """
name: one
nodes:
  only: {call: cyclone_test_handlers.basic:echo}
"""


def _cells(tab: Any, node: str) -> list[str]:
    """The cells of ``node``'s row of the run page's steps table, as shown."""
    row = tab.locator(f'table.steps tr[data-node="{node}"] td')
    return [text.strip() for text in row.all_inner_texts()]


def test_a_rerun_names_the_run_and_node_its_reused_steps_come_from(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client(workers=2)
    client.start()
    original = client.submit(load_flow_text(RERUN), {"go": False})
    assert client.wait(original, timeout=20).state == "completed"
    new_id = client.rerun(original, "c")
    assert client.wait(new_id, timeout=20).state == "completed"
    short = original[:8]
    with serve(client) as url:
        page.goto(f"{url}/runs/{new_id}")
        _node(page, "c", "completed")
        a, b, c = (_cells(page, n) for n in "abc")
        # attempt: none for a step never claimed in this run (a and b did not run)
        assert (a[3], b[3], c[3]) == ("–", "–", "1/1")
        assert a[-1] == f"reused from run {short} (node a)"
        assert b[-1] == (
            "skipped: when 'nodes.a.output.go' was false (nodes.a.output.go = false); "
            f"reused from run {short} (node b)"
        )
        assert "skipped, reused" in page.text_content('svg.dag g[data-node="b"]')
        page.screenshot(path=str(tmp_path / "ui-rerun.png"), full_page=True)

        page.goto(f"{url}/runs/{new_id}/steps/b")
        kv = page.inner_text("table.kv")
        assert "attempt\t– (never claimed)" in kv
        assert f"reused from run {short} (node b), the run this one reruns" in kv
        assert "skipped: when 'nodes.a.output.go' was false" in kv
        page.click(f'table.kv a[href$="/runs/{original}/steps/b"]')
        page.wait_for_url(f"{url}/runs/{original}/steps/b")
        assert "reused" not in page.inner_text("table.kv")  # the original: it was decided


OLD_DURATIONS = (
    r"\b\d+m\d\ds\b|\b\d+\.0 s\b"  # format_elapsed's 1m52s, a "%.1f s" of whole seconds
    r"|\b\d+(?:\.\d)?[smhd] ago\b|\bin \d+(?:\.\d)?[smhd]\b"  # the old _ago: 45s ago, in 5m
    r"|\b(?:[6-9]\d|\d{3,})\.\d s\b"  # "%.1f s" past a minute: 307.4 s
)
"""The duration styles the dashboard no longer writes (one style: format_span)."""


def test_the_overview_runs_and_step_pages_write_times_from_now_as_spans(
    make_client: Callable[..., Client], page: Any, db: Any, tmp_path: Path
) -> None:
    client = make_client()
    run_id = client.submit(load_flow_text(ONE), {})  # not started: its step stays claimable
    db.execute("UPDATE cyclone_steps SET scheduled_at = now() - interval '307 seconds'")
    db.execute("UPDATE cyclone_runs SET created_at = now() - interval '307 seconds'")
    with serve(client) as url:
        page.goto(f"{url}/")
        overview = page.inner_text("main")
        page.screenshot(path=str(tmp_path / "ui-overview-times.png"), full_page=True)
        page.goto(f"{url}/runs")
        runs = page.inner_text("main")
        page.goto(f"{url}/runs/{run_id}/steps/only")
        step = page.inner_text("main")
    # the oldest available step's wait, the run's creation, the step's schedule
    assert re.search(r"\b5 min 0[7-9] s\b", overview), overview
    assert re.search(r"\b5 min 0[7-9] s ago\b", runs), runs
    assert re.search(r"\(5 min 0[7-9] s ago\)", step), step
    assert f"run {run_id[:8]}" in step
    for text in (overview, runs, step):
        assert not re.search(OLD_DURATIONS, text), text


def test_the_health_page_writes_every_duration_as_the_dashboard_does(
    make_client: Callable[..., Client],
    page: Any,
    db: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # a planner that does not walk the claim index, as on any small table
    monkeypatch.setenv("PGOPTIONS", "-c enable_indexscan=off -c enable_bitmapscan=off")
    client = make_client()
    client.submit(load_flow_text(ONE), {})  # not started: its step stays claimable
    db.execute("UPDATE cyclone_steps SET scheduled_at = now() - interval '307 seconds'")
    with serve(client) as url:
        page.goto(f"{url}/health")
        text = page.inner_text("main")
        page.screenshot(path=str(tmp_path / "ui-health.png"), full_page=True)
    # the backlog's age (the advice) and the transactions' threshold, one format
    assert re.search(r"has waited 5 min 0[7-9] s", text), text
    assert "none older than 5 min 00 s" in text, text
    assert not re.search(OLD_DURATIONS, text), text
    assert "no: a scan is cheaper on a table this small (cost " in text, text
    assert "\tNO" not in text


REPORT_V1 = """# the nightly report: fetch, then publish
# <script>alert(1)</script> stays a comment
name: report
nodes:
  fetch:
    call: cyclone_test_handlers.basic:echo  # reads the source
  publish:
    call: cyclone_test_handlers.basic:echo
    needs: [fetch]
"""
REPORT_V2 = """# the nightly report: fetch, publish, then notify
# <script>alert(1)</script> stays a comment
name: report
nodes:
  fetch:
    call: cyclone_test_handlers.basic:echo  # reads the source
  publish:
    call: cyclone_test_handlers.basic:echo
    needs: [fetch]
    timeout: 30s
  notify:
    call: cyclone_test_handlers.basic:echo
    needs: [publish]
"""


def test_a_deployed_flow_its_revision_and_the_diff_of_two(
    make_client: Callable[..., Client], page: Any, tmp_path: Path
) -> None:
    client = make_client()
    repo = tmp_path / "repo"
    flow_file = repo / "flows" / "report.yaml"
    flow_file.parent.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    flow_file.write_text(REPORT_V1, encoding="utf-8")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "report"], check=True)
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    client.deploy([str(flow_file)], by="alice")  # committed
    flow_file.write_text(REPORT_V2, encoding="utf-8")
    client.deploy([str(flow_file)], by="bob")  # changed, not committed: dirty
    client.submit("report@1", {})
    alerts: list[str] = []
    page.on("dialog", lambda d: (alerts.append(d.message), d.dismiss()))
    with serve(client) as url:
        page.goto(f"{url}/flows")
        page.click('tr[data-flow="report"] a[href$="/flows/deployed/report"]')
        page.wait_for_url(f"{url}/flows/deployed/report")
        assert page.locator("table.revisions tr[data-revision]").count() == 2
        assert "current" in page.inner_text('tr[data-revision="2"]')
        for rev, dirty in (("1", False), ("2", True)):
            row = page.inner_text(f'tr[data-revision="{rev}"]')
            assert commit[:12] in row and "flows/report.yaml" in row
            assert ("dirty" in row) is dirty
        page.screenshot(path=str(tmp_path / "ui-flow.png"), full_page=True)

        page.click('tr[data-revision="1"] a[href$="/report/1"]')
        page.wait_for_url(f"{url}/flows/deployed/report/1")
        source = page.inner_text("pre.source")
        assert source == REPORT_V1.rstrip("\n") or source == REPORT_V1
        assert "<script>alert(1)</script> stays a comment" in source  # shown as text
        assert page.locator("svg.dag g[data-node]").count() == 2
        assert page.locator("table.runs tr[data-run]").count() == 1
        page.screenshot(path=str(tmp_path / "ui-revision.png"), full_page=True)

        page.goto(f"{url}/flows/deployed/report")
        page.select_option('form.diff-form select[name="a"]', "1")
        page.select_option('form.diff-form select[name="b"]', "2")
        page.click('button[data-action="diff"]')
        page.wait_for_url(re.compile(r".*/flows/deployed/report/diff\?a=1&b=2$"))
        added = page.locator("table.sbs td.line-added")
        assert "timeout: 30s" in added.all_inner_texts()[0] or any(
            "timeout: 30s" in t for t in added.all_inner_texts()
        )
        assert any("notify:" in t for t in added.all_inner_texts())
        changed = page.locator("table.sbs td.line-changed").all_inner_texts()
        assert "# the nightly report: fetch, then publish" in changed
        assert "# the nightly report: fetch, publish, then notify" in changed
        # the highlight is drawn: a changed line's cell has a colour, an unchanged one none
        colour = page.eval_on_selector(
            "table.sbs td.line-added", "e => getComputedStyle(e).backgroundColor"
        )
        plain = page.eval_on_selector(
            "table.sbs td.line-same", "e => getComputedStyle(e).backgroundColor"
        )
        assert colour != plain and colour not in ("rgba(0, 0, 0, 0)", "transparent")
        changes = page.locator("ul.changes li").all_inner_texts()
        assert any(c.startswith("+ node notify") for c in changes), changes
        assert any(c.startswith("~ node publish") and "timeout" in c for c in changes), changes
        page.screenshot(path=str(tmp_path / "ui-diff.png"), full_page=True)
    assert alerts == []  # no comment ran as a script
