"""The dashboard's deployed flows (issue 33): the Flows page's deployed flows with their
current revision, a flow's revisions, a revision's source (comments kept, escaped), DAG and
runs, the side-by-side diff of two revisions with the node-level change list, a run's link
to its revision, the runs page's revision filter, and 404 / 400 for what does not exist.
Flows are deployed with ``Client.deploy`` from files in the test's tmp dir; the pages are
read through starlette's TestClient over a real Client and Postgres."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed")

from starlette.testclient import TestClient

from cyclone_flow import Client
from cyclone_flow.ui import create_app

BASE = "http://localhost:8080"
ECHO = "cyclone_test_handlers.basic:echo"
HOSTILE_COMMENT = "# <script>alert(1)</script> and \"quotes\" & 'ticks'"
V1 = f"""# the nightly report
{HOSTILE_COMMENT}
name: report
nodes:
  fetch:
    call: {ECHO}  # reads the source
  publish:
    call: {ECHO}
    needs: [fetch]
"""
V2 = f"""# the nightly report, with a notification
{HOSTILE_COMMENT}
name: report
nodes:
  fetch:
    call: {ECHO}  # reads the source
  publish:
    call: {ECHO}
    needs: [fetch]
    timeout: 30s
  notify:
    call: {ECHO}
    needs: [publish]
"""
OTHER = f"""
name: other
nodes:
  only:
    call: {ECHO}
"""


def _http(client: Client, **options: object) -> TestClient:
    return TestClient(create_app(client, **options), base_url=BASE, follow_redirects=False)  # type: ignore[arg-type]


def _deploy(client: Client, folder: Path, text: str, *, by: str = "alice") -> None:
    folder.mkdir(exist_ok=True)
    (folder / "report.yaml").write_text(text, encoding="utf-8")
    client.deploy([str(folder / "report.yaml")], by=by)


def _two_revisions(client: Client, tmp_path: Path) -> None:
    _deploy(client, tmp_path / "flows", V1, by="alice")
    _deploy(client, tmp_path / "flows", V2, by="bob")


def _text(page: str) -> str:
    """The page's text, tags dropped and entities decoded (what a reader sees)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_flows_page_lists_deployed_flows_and_keeps_the_stored_definitions(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _two_revisions(client, tmp_path)
    (tmp_path / "other.yaml").write_text(OTHER, encoding="utf-8")
    client.deploy([str(tmp_path / "other.yaml")], by="carol")
    client.submit("report", {})
    client.submit("report@1", {})
    http = _http(client)

    page = http.get("/flows")
    assert page.status_code == 200, page.text
    rows = dict(re.findall(r'<tr data-flow="([^"]+)">(.*?)</tr>', page.text, re.S))
    assert set(rows) == {"report", "other"}
    report = rows["report"]
    assert 'href="/flows/deployed/report"' in report
    assert '<a href="/flows/deployed/report/2">2</a>' in report
    assert "<td>bob</td>" in report
    assert "<td>2</td>" in report  # runs in the last day, both revisions
    assert "retired" not in report
    assert '<a href="/flows/deployed/other/1">1</a>' in rows["other"]
    # the stored definitions stay reachable: the two of report, the one of other
    stored = page.text[page.text.index('id="stored"') :]
    assert len(re.findall(r'href="/flows/(\d+)"', stored)) == 3
    flow_id = re.findall(r'href="/flows/(\d+)"', stored)[0]
    assert http.get(f"/flows/{flow_id}").status_code == 200
    # ?name= keeps to one flow, in both sections
    one = http.get("/flows?name=other").text
    assert re.findall(r'<tr data-flow="([^"]+)"', one) == ["other"]
    assert http.get("/flows/deployed").headers["location"] == "/flows"

    client.retire("other", by="carol")
    rows = dict(re.findall(r'<tr data-flow="([^"]+)">(.*?)</tr>', http.get("/flows").text, re.S))
    assert 'class="pill retired"' in rows["other"] and "retired" not in rows["report"]
    assert 'class="pill retired"' in http.get("/flows/deployed/other").text


def test_a_flow_page_lists_its_revisions_and_offers_the_diff(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _two_revisions(client, tmp_path)
    run_id = client.submit("report@1", {})
    client.rollback("report", to=1, by="carol")
    http = _http(client)

    page = http.get("/flows/deployed/report")
    assert page.status_code == 200, page.text
    revs = re.findall(r'<tr data-revision="(\d+)"( class="current")?>(.*?)</tr>', page.text, re.S)
    assert [(n, bool(c)) for n, c, _ in revs] == [("3", True), ("2", False), ("1", False)]
    cells = {n: _text(body) for n, _, body in revs}
    assert "rollback of revision 1" in cells["3"] and "carol" in cells["3"]
    assert 'href="/flows/deployed/report/1"' in revs[0][2]  # the revision it restored
    assert "deploy" in cells["2"] and "bob" in cells["2"]
    assert "current" in cells["3"] and "current" not in cells["2"]
    assert str(tmp_path / "flows" / "report.yaml") in cells["1"]  # the file deploy read
    assert "not in git" in cells["1"]
    assert 'href="/runs?flow=report&amp;revision=1">1</a>' in revs[2][2]  # its one run
    assert 'href="/flows/deployed/report/diff?a=1&amp;b=2"' in page.text
    # the form of the diff page: two selects, the previous revision against the current
    form = page.text[page.text.index('class="filters diff-form"') :]
    assert 'action="/flows/deployed/report/diff"' in form
    assert re.search(r'<select name="a">.*?<option value="2" selected>', form, re.S)
    assert re.search(r'<select name="b"><option value="3" selected>', form)

    # the runs page filters by revision
    runs = http.get("/runs?flow=report&revision=1").text
    assert re.findall(r'<tr data-run="([^"]+)"', runs) == [run_id]
    other = http.get("/runs?flow=report&revision=2").text
    assert re.findall(r'<tr data-run="([^"]+)"', other) == []
    assert http.get("/runs?revision=x").status_code == 400


def test_a_revision_page_shows_its_source_as_deployed_its_dag_and_its_runs(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _two_revisions(client, tmp_path)
    first = client.submit("report@1", {})
    second = client.submit("report", {})
    http = _http(client)

    page = http.get("/flows/deployed/report/1")
    assert page.status_code == 200, page.text
    source = re.search(r'<pre class="yaml source" data-revision="1">(.*?)</pre>', page.text, re.S)
    assert source and html.unescape(source.group(1)) == V1  # the file's text, every byte
    # the comment is text: escaped, never markup
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert set(re.findall(r'<g class="node[^"]*" data-node="([^"]+)"', page.text)) == {
        "fetch",
        "publish",
    }
    assert re.findall(r'<tr data-run="([^"]+)"', page.text) == [first]
    assert "diff with the current revision (2)" in page.text
    assert 'rel="next"' in page.text and 'rel="prev"' not in page.text

    current = http.get("/flows/deployed/report/2").text
    assert set(re.findall(r'<g class="node[^"]*" data-node="([^"]+)"', current)) == {
        "fetch",
        "publish",
        "notify",
    }
    assert re.findall(r'<tr data-run="([^"]+)"', current) == [second]
    assert 'data-link="diff-previous"' in current and "current</span>" in current

    # a run's page names its revision and links to it; a run from a file does not
    run_page = http.get(f"/runs/{first}").text
    assert '<a href="/flows/deployed/report/1" data-link="revision">revision 1</a>' in run_page
    assert 'href="/flows/deployed/report">report</a>' in run_page


def test_the_diff_page_shows_both_sources_side_by_side_and_what_changed(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _two_revisions(client, tmp_path)
    http = _http(client)

    page = http.get("/flows/deployed/report/diff", params={"a": 1, "b": 2})
    assert page.status_code == 200, page.text
    rows = re.findall(
        r'<tr class="(diff-row|same-row)">\s*<td class="num">(\d*)</td>'
        r'<td class="code line-(\w+)">(.*?)</td>\s*'
        r'<td class="num">(\d*)</td><td class="code line-(\w+)">(.*?)</td></tr>',
        page.text,
        re.S,
    )
    shown = [(lk, html.unescape(lt), rk, html.unescape(rt)) for _, _, lk, lt, _, rk, rt in rows]
    # every line of both sources, each on its side, in order
    assert "".join(lt + "\n" for lk, lt, _, _ in shown if lk != "blank") == V1
    assert "".join(rt + "\n" for _, _, rk, rt in shown if rk != "blank") == V2
    assert (
        "changed",
        "# the nightly report",
        "changed",
        "# the nightly report, with a notification",
    ) in shown
    assert ("blank", "", "added", "    timeout: 30s") in shown
    assert ("blank", "", "added", "  notify:") in shown
    assert ("same", HOSTILE_COMMENT, "same", HOSTILE_COMMENT) in shown
    assert "<script>alert(1)</script>" not in page.text
    assert sum(1 for r in rows if r[0] == "diff-row") == 5
    # the node-level change list: Client.diff_revisions, worded as `flows diff` does
    found = re.findall(r'<li class="change[^"]*"><code>(.*?)</code>', page.text)
    changes = [html.unescape(c) for c in found]
    assert any(c.startswith("+ node notify") for c in changes), changes
    assert any(c.startswith("~ node publish") and "timeout" in c for c in changes)

    # b absent: against the current revision; the same revision: no change
    assert http.get("/flows/deployed/report/diff?a=1").text.count('class="diff-row"') == 5
    same = http.get("/flows/deployed/report/diff?a=2&b=2")
    assert same.status_code == 200 and "No change in the definition" in same.text
    assert 'class="diff-row"' not in same.text


def test_unknown_flows_and_revisions_are_404_and_bad_numbers_refused(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _deploy(client, tmp_path / "flows", V1)
    http = _http(client)
    for path in (
        "/flows/deployed/nope",
        "/flows/deployed/nope/1",
        "/flows/deployed/nope/diff?a=1",
        "/flows/deployed/report/2",
        "/flows/deployed/report/0",
        "/flows/deployed/report/abc",
        "/flows/deployed/report/-1",
        "/flows/deployed/report/1.5",
        "/flows/deployed/report/99999999999999999999",
        "/flows/deployed/report/diff?a=1&b=7",
        "/flows/deployed/report/diff?a=7",
    ):
        page = http.get(path)
        assert page.status_code == 404, (path, page.status_code)
        assert "<h1>404</h1>" in page.text
    for path in (
        "/flows/deployed/report/diff",
        "/flows/deployed/report/diff?a=x",
        "/flows/deployed/report/diff?a=1&b=-2",
    ):
        assert http.get(path).status_code == 400, path
    # a name with markup in it is shown as text
    hostile = http.get("/flows/deployed/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert hostile.status_code == 404
    assert "<script>alert" not in hostile.text and "&lt;script&gt;alert(1)" in hostile.text
    hostile = http.get("/flows/deployed/report/%3Cb%3Ex")
    assert hostile.status_code == 404 and "<b>x" not in hostile.text


def test_a_read_only_dashboard_shows_the_deployed_pages(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    _two_revisions(client, tmp_path)
    http = _http(client, read_only=True)
    for path in (
        "/flows",
        "/flows/deployed/report",
        "/flows/deployed/report/1",
        "/flows/deployed/report/diff?a=1&b=2",
    ):
        page = http.get(path)
        assert page.status_code == 200, path
        assert 'method="post"' not in page.text
    assert http.post("/flows/deployed/report").status_code == 405
