"""The dashboard's ASGI application: :func:`create_app`.

Server-rendered pages (Jinja2, autoescape on) over a :class:`~cyclone_flow.Client`: the
overview, the runs list, a run with its DAG (live through an htmx fragment polled every
``poll_interval_s``), a step with "why is it not running", the stored flows. Actions
(cancel, retry, retry a node, signal, pause/resume/trigger a schedule, bulk
cancel/retry) call
the same Client methods as the CLI; they exist only without ``read_only``, and every POST
carries the app's secret form token and passes an ``Origin``/``Sec-Fetch-Site`` check.
Every request passes a ``Host`` check and a body limit first (:mod:`cyclone_flow.ui.guards`).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from ruamel.yaml import YAML
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cyclone_flow import describe
from cyclone_flow._json import OUTPUT_SHOWN_BYTES
from cyclone_flow.client import Client
from cyclone_flow.db.rows import DeployedFlow, Run, Step
from cyclone_flow.durations import format_duration, format_span
from cyclone_flow.errors import (
    AmbiguousRunIdError,
    ConfigError,
    CycloneError,
    FlowNotDeployedError,
    InputValidationError,
    NodeNotFoundError,
    PayloadTooLargeError,
    RevisionNotFoundError,
    RunNotFoundError,
    ScheduleNotFoundError,
)
from cyclone_flow.run_ids import is_run_id_start
from cyclone_flow.run_view import RunView
from cyclone_flow.ui.dag import LEGEND, DagNode, dag_nodes, render_svg
from cyclone_flow.ui.guards import LOOPBACK_HOSTS, BodyLimit, TrustedHosts
from cyclone_flow.ui.source_diff import side_by_side
from cyclone_flow.ui.timeline import render_timeline, timeline_rows

__all__ = ["PAGE_SIZE", "create_app"]

_HERE = Path(__file__).parent
PAGE_SIZE = 50
"""Runs per page of the runs list."""
ITEMS_PAGE_SIZE = 50
"""Fan-out items per page (a fan-out node's step page, its box expanded on the run page)."""
STEP_LOG_LINES = 200
"""Log lines on a step page: the last ones (a note says how many earlier ones are not)."""
JSON_SHOWN_BYTES = OUTPUT_SHOWN_BYTES
"""Pretty JSON shown on a page, at most (the rest: the download link); the cap of a
step's ``output`` in the CLI's ``--json`` documents too."""
TEXT_SHOWN_CHARS = 16 * 1024
"""Characters of an error or a traceback shown on a page, at most."""
MAX_BODY_BYTES = 1024 * 1024
"""The largest request body accepted (413 above, counted on the bytes read)."""
COUNT_CAP = 10_000
"""Runs counted at most per overview count (shown as ``10000+``)."""
STEP_ROWS = 300
"""Most rows of a run page's steps table (a 2,000-node run: the DAG shows every node)."""
WHY_ROWS = 50
"""Most nodes listed under "why nodes wait" on a run page (the rest are counted)."""
LIVE_POLL_PER_BUILD = 4
"""A run page's live part is fetched again after at least this many times as long as it
took to build (and never sooner than ``poll_interval_s``): a big run's page is not
rebuilt back to back."""
MAX_LIVE_POLL_MS = 10_000
"""The longest wait between two fetches of a run page's live part (ms)."""

_ACTIVE = ("pending", "available", "running", "waiting")


def _pretty(value: Any) -> tuple[str, bool]:
    """``value`` as indented JSON, cut at :data:`JSON_SHOWN_BYTES`; and whether it was cut."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) <= JSON_SHOWN_BYTES:
        return text, False
    return text[:JSON_SHOWN_BYTES], True


def _cut(text: str | None, limit: int = TEXT_SHOWN_CHARS) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more chars)"


def _stamp(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if when else ""


def _parse_time(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 time of a filter (naive: UTC); 400 when it is not one."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(
            400, f"{name} is not a time (ISO 8601, e.g. 2026-12-01T08:00)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class _Guard:
    """Authentication (HTTP basic with the token as password, or ``Bearer``) and 405 for
    every method but GET/HEAD when read-only."""

    def __init__(self, app: ASGIApp, *, token: str | None, read_only: bool) -> None:
        self.app = app
        self.token = token
        self.read_only = read_only

    def _authorized(self, headers: Mapping[bytes, bytes]) -> bool:
        if self.token is None:
            return True
        value = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, cred = value.partition(" ")
        given = ""
        if scheme.lower() == "bearer":
            given = cred.strip()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(cred.strip(), validate=True).decode().partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return False
        return secrets.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        response: Response | None = None
        if not self._authorized(headers):
            response = Response(
                "authentication required\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="cyclone-flow"'},
            )
        elif self.read_only and scope["method"] not in ("GET", "HEAD"):
            response = Response(
                "read-only dashboard: no actions\n", status_code=405, headers={"Allow": "GET, HEAD"}
            )
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _SecurityHeaders:
    """The security headers (CSP, framing, sniffing, referrer) on every response, the
    guards' refusals (413, 400, 401, 405) included: the outermost layer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"content-security-policy", _CSP),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                ]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


_CSP = (
    b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


class _Dashboard:
    """The pages and actions over one client (see :func:`create_app`)."""

    def __init__(
        self, client: Client, *, read_only: bool, poll_interval_s: float, title: str
    ) -> None:
        self.client = client
        self.read_only = read_only
        self.poll_ms = int(poll_interval_s * 1000)
        self.title = title
        self.csrf = secrets.token_urlsafe(32)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            stamp=_stamp,
            seconds=format_span,
            period=format_duration,
            pretty=_pretty,
            cut=_cut,
            legend=LEGEND,
            # the one wording of a run and its steps, shared with the CLI
            skip_text=describe.describe_skip,
            reuse_text=describe.describe_reuse,
            attempt_text=describe.describe_attempt,
            no_attempt=describe.NO_ATTEMPT,
            state_word=describe.state_word,
            detail_parts=describe.detail_parts,
            step_error=describe.step_error,
            step_took=describe.step_took,
            duration=describe.duration,
            relative=describe.relative,
            short_id=describe.short_id,
            wait_text=describe.wait_text,
            queue_info_lines=describe.queue_info_lines,
        )

    # -- rendering -------------------------------------------------------------------------

    def page(self, request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        base = str(request.scope.get("root_path", "")).rstrip("/")
        html = self.env.get_template(template).render(
            base=base,
            title=self.title,
            read_only=self.read_only,
            csrf=self.csrf,
            poll_ms=self.poll_ms,
            now=datetime.now(UTC),
            message=request.query_params.get("msg", "")[:500],
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def error(self, request: Request, status: int, text: str) -> HTMLResponse:
        return self.page(request, "error.html", status=status, status_code=status, text=text)

    # -- reads -----------------------------------------------------------------------------

    def overview(self, request: Request) -> HTMLResponse:
        c = self.client
        counts = {"hour": c.reads.count_runs_by_state(3600, cap=COUNT_CAP)}
        counts["day"] = c.reads.count_runs_by_state(86400, cap=COUNT_CAP)
        queues = c.queue_stats()
        done = {t.queue: t for t in c.reads.queue_throughput(cap=COUNT_CAP)}
        by_name = {q.queue: q for q in queues}
        queue_rows = [
            {"name": name, "stats": by_name.get(name), "done": done.get(name)}
            for name in sorted(set(by_name) | set(done))
        ]
        workers = c.workers()
        served = {q for w in workers if w.live for q in w.queues}
        warnings: list[tuple[str, str, str | None]] = []  # text, link kind, run id
        for q in queues:
            if q.available and q.queue not in served:
                warnings.append(
                    (
                        f"queue {q.queue!r} has {q.available} available step(s) "
                        "and no live worker serves it",
                        "",
                        None,
                    )
                )
        for step in c.reads.list_reclaimed_steps():
            warnings.append(
                (
                    f"step {step.node} reclaimed {step.reclaims} times ({step.state})",
                    "run",
                    step.run_id,
                )
            )
        for rid in c.reads.list_runs_past_deadline():
            warnings.append(("run past its deadline, not failed yet", "run", rid))
        for key in c.reads.list_held_sequences():
            warnings.append(
                (f"sequence {key!r} is held: its first open run is not released", "", None)
            )
        return self.page(
            request,
            "overview.html",
            counts=counts,
            cap=COUNT_CAP,
            queues=queue_rows,
            workers=workers,
            held=c.reads.count_leases(),
            schedules=c.list_schedules(),
            warnings=warnings,
        )

    def runs(self, request: Request) -> Response:
        params = request.query_params
        search = (params.get("q") or "").strip()
        if search and is_run_id_start(search):
            try:
                rid = self.client.resolve_run_id(search)
            except AmbiguousRunIdError as exc:
                return self.error(request, 409, str(exc))
            except RunNotFoundError:
                rid = None
            if rid is not None:
                base = str(request.scope.get("root_path", "")).rstrip("/")
                return RedirectResponse(f"{base}/runs/{rid}", status_code=303)
        state = params.get("state") or None
        if state is not None and state not in ("running", "completed", "failed", "cancelled"):
            raise HTTPException(400, f"unknown run state {state!r}")
        after = None
        if params.get("after"):
            at, _, rid_text = params["after"].partition("_")
            when = _parse_time(at, "after")
            if when is None:
                raise HTTPException(400, "after: not <created_at>_<run id>")
            after = (when, rid_text)
        try:
            rows = self.client.reads.list_runs_page(
                limit=PAGE_SIZE + 1,
                after=after,
                flow=params.get("flow") or None,
                state=state,
                queue=params.get("queue") or None,
                unique_key=search or None,
                since=_parse_time(params.get("since"), "since"),
                until=_parse_time(params.get("until"), "until"),
                revision=self._int(request, "revision"),
            )
        except RunNotFoundError:
            raise HTTPException(400, "after: not a run id") from None
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        next_query = None
        if more:
            last = rows[-1]
            keep = {k: v for k, v in params.items() if k != "after" and v}
            keep["after"] = f"{last.created_at.isoformat()}_{last.id}"
            next_query = urlencode(keep)
        return self.page(
            request,
            "runs.html",
            runs=rows,
            next_query=next_query,
            first_query=urlencode({k: v for k, v in params.items() if k != "after" and v}),
            paged=after is not None,
            f={
                k: params.get(k, "")
                for k in ("flow", "revision", "state", "queue", "since", "until", "q")
            },
        )

    def _run_or_404(self, run_id: str) -> Run:
        try:
            return self.client.get_run(run_id)
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id}") from None

    def _view_or_404(self, run_id: str) -> RunView:
        """The run page's one read: the run, its steps, item progress, reasons, queue
        facts and definition of one snapshot (``Client.run_view``)."""
        try:
            return self.client.run_view(run_id, definition=True)
        except RunNotFoundError:
            raise HTTPException(404, f"no run {run_id}") from None

    def _run_context(self, request: Request, view: RunView, began: float) -> dict[str, Any]:
        run, steps, progress = view.run, view.steps, view.progress
        assert view.definition is not None  # asked for
        nodes = dag_nodes(view.definition, steps, progress)
        base = str(request.scope.get("root_path", "")).rstrip("/")

        def href(node: DagNode) -> str:
            if node.type == "fan_out":  # the box expands to its items on the run's page
                name = quote(node.name, safe="")
                return f"{base}/runs/{run.id}?expand={name}#items-{name}"
            return step_href(node.name)

        def step_href(node: str) -> str:
            return f"{base}/runs/{run.id}/steps/{quote(node, safe='')}"

        waiting = view.waiting if run.state == "running" else {}
        retryable = sorted(s.node for s in steps if s.state == "discarded")
        reasons = list(waiting.items())
        built_ms = (time.perf_counter() - began) * 1000
        return {
            "run": run,
            "view_now": view.now,
            "steps": steps[:STEP_ROWS],
            "steps_total": len(steps),
            "fan_outs": [s for s in steps if s.type == "fan_out"],
            "reasons": reasons[:WHY_ROWS],
            "reasons_total": len(reasons),
            "live_ms": max(
                self.poll_ms, min(MAX_LIVE_POLL_MS, round(built_ms * LIVE_POLL_PER_BUILD))
            ),
            "progress": progress,
            "svg": render_svg(nodes, href),
            "timeline": render_timeline(run, timeline_rows(steps), view.now, step_href),
            "waiting": waiting,
            "retryable": retryable,
            "awaited_signal": next((w.signal for w in waiting.values() if w.signal), ""),
            "live": run.state == "running",
        }

    def run(self, request: Request) -> HTMLResponse:
        began = time.perf_counter()
        view = self._view_or_404(request.path_params["run_id"])
        ctx = self._run_context(request, view, began)
        run = view.run
        expanded = None
        wanted = request.query_params.get("expand")
        for step in ctx["fan_outs"]:
            if step.node == wanted:
                items, pages = self._items_page(run, step, 1)
                expanded = {
                    "step": step,
                    "rows": items,
                    "pages": pages,
                    "total": self._total(step),
                }
        return self.page(
            request,
            "run.html",
            queue_info=view.queue,
            expanded=expanded,
            page_size=ITEMS_PAGE_SIZE,
            **ctx,
        )

    def run_live(self, request: Request) -> HTMLResponse:
        began = time.perf_counter()
        view = self._view_or_404(request.path_params["run_id"])
        return self.page(request, "_run_live.html", **self._run_context(request, view, began))

    def _step(self, run: Run, node: str, item: int | None) -> Step:
        """The top-level step of ``node``, or its item ``item``; 404 when there is none."""
        top = [s for s in self.client.list_steps(run.id, items=False) if s.node == node]
        if not top:
            raise HTTPException(404, f"no node {node!r} in run {run.id}")
        if item is None:
            return top[0]
        found = self.client.reads.list_items(run.id, node, start=item, limit=1)
        if not found or found[0].item_index != item:
            raise HTTPException(404, f"no item {item} of node {node!r} in run {run.id}")
        return found[0]

    @staticmethod
    def _total(step: Step) -> int:
        return (step.items_total or 0) if step.type == "fan_out" else 0

    def _items_page(self, run: Run, step: Step, page: int) -> tuple[list[Step], int]:
        """Page ``page`` (from 1) of a fan-out step's items, a keyset read of
        :data:`ITEMS_PAGE_SIZE` from item index ``(page - 1) * size``; and the page count."""
        total = self._total(step)
        pages = max(1, -(-total // ITEMS_PAGE_SIZE))
        if not total:
            return [], pages
        start = (page - 1) * ITEMS_PAGE_SIZE
        return self.client.reads.list_items(
            run.id, step.node, start=start, limit=ITEMS_PAGE_SIZE
        ), pages

    def _page(self, request: Request, step: Step) -> int:
        """The ``page`` query parameter: 1 (absent) to the item page count, else 400."""
        text = request.query_params.get("page")
        if text is None or text == "":
            return 1
        pages = max(1, -(-self._total(step) // ITEMS_PAGE_SIZE))
        if not text.isdigit() or len(text) > 9 or not 1 <= int(text) <= pages:
            raise HTTPException(400, f"page must be a whole number from 1 to {pages}")
        return int(text)

    def step(self, request: Request) -> HTMLResponse:
        run = self._run_or_404(request.path_params["run_id"])
        node = request.path_params["node"]
        item = self._int(request, "item")
        step = self._step(run, node, item)
        page = self._page(request, step) if item is None else 1
        items, pages = self._items_page(run, step, page) if item is None else ([], 1)
        why = None
        if run.state == "running" and step.state in ("pending", "available", "waiting"):
            why = self.client.explain(run.id, items=item is not None).get(step.node)
        logs, logs_total = self.client.reads.step_log_node_tail(run.id, node, STEP_LOG_LINES)
        return self.page(
            request,
            "step.html",
            run=run,
            step=step,
            item=item,
            items=items,
            items_total=self._total(step) if item is None else 0,
            page=page,
            pages=pages,
            page_size=ITEMS_PAGE_SIZE,
            why=why,
            logs=logs,
            logs_hidden=logs_total - len(logs),
        )

    def step_items(self, request: Request) -> HTMLResponse:
        """The items fragment (htmx): one page of a fan-out node's items."""
        run = self._run_or_404(request.path_params["run_id"])
        step = self._step(run, request.path_params["node"], None)
        if step.type != "fan_out":
            raise HTTPException(404, f"node {step.node!r} is no fan-out node")
        page = self._page(request, step)
        items, pages = self._items_page(run, step, page)
        return self.page(
            request,
            "_items.html",
            run=run,
            step=step,
            items=items,
            items_total=self._total(step),
            page=page,
            pages=pages,
            page_size=ITEMS_PAGE_SIZE,
        )

    @staticmethod
    def _int(request: Request, name: str) -> int | None:
        text = request.query_params.get(name)
        if text is None or text == "":
            return None
        if not text.isdigit() or len(text) > 9:
            raise HTTPException(400, f"{name} must be a whole number")
        return int(text)

    def step_output(self, request: Request) -> Response:
        """A step's whole output as a download (``Client.get_step_output``, the read of
        ``cyclone-flow output``); 404 for an unknown node or item, null before it has one."""
        run = self._run_or_404(request.path_params["run_id"])
        node, item = request.path_params["node"], self._int(request, "item")
        try:
            found = self.client.get_step_output(run.id, node, item)
        except NodeNotFoundError as exc:
            raise HTTPException(404, str(exc)) from None
        name = f"{run.id}-{node}" + (f"-{item}" if item is not None else "")
        return JSONResponse(
            found.output, headers={"Content-Disposition": f'attachment; filename="{name}.json"'}
        )

    def run_output(self, request: Request) -> Response:
        run = self._run_or_404(request.path_params["run_id"])
        which = request.path_params["which"]
        if which not in ("input", "output"):
            raise HTTPException(404, f"no {which}.json: input.json or output.json")
        value = run.input if which == "input" else run.output
        return JSONResponse(
            value, headers={"Content-Disposition": f'attachment; filename="{run.id}-{which}.json"'}
        )

    def flows(self, request: Request) -> HTMLResponse:
        """The deployed flows (their current revision), then the stored definitions; with
        ``?name=`` those of one name."""
        name = request.query_params.get("name") or None
        deployed = [f for f in self.client.list_deployed_flows() if name in (None, f.name)]
        return self.page(
            request,
            "flows.html",
            deployed=deployed,
            flows=self.client.reads.list_flows(name=name),
            name=name,
        )

    def flow(self, request: Request) -> HTMLResponse:
        text = request.path_params["flow_id"]
        row = self.client.reads.get_flow(int(text)) if text.isdigit() and len(text) < 18 else None
        if row is None or row.definition is None:
            raise HTTPException(404, f"no stored flow {text}")
        yaml = YAML()
        yaml.default_flow_style = False
        buf = io.StringIO()
        yaml.dump(row.definition, buf)
        svg = render_svg(dag_nodes(row.definition), lambda _n: None)
        return self.page(request, "flow.html", flow=row, yaml_text=buf.getvalue(), svg=svg)

    # -- deployed flows and their revisions --------------------------------------------------

    def _deployed_or_404(self, name: str) -> DeployedFlow:
        found = self.client.get_deployed_flow(name)
        if found is None:
            raise HTTPException(404, f"no deployed flow {name!r}")
        return found

    @staticmethod
    def _revision_number(name: str, text: str) -> int:
        """A revision number of a path (``/flows/deployed/NAME/3``): 404 when it is not
        a whole number (no such revision)."""
        if not text.isdigit() or len(text) > 9:
            raise HTTPException(404, f"no revision {text!r} of flow {name!r}")
        return int(text)

    def deployed_flows(self, request: Request) -> RedirectResponse:
        """``/flows/deployed``: the deployed flows are listed on the Flows page."""
        base = str(request.scope.get("root_path", "")).rstrip("/")
        return RedirectResponse(f"{base}/flows", status_code=303)

    def deployed_flow(self, request: Request) -> HTMLResponse:
        """A deployed flow: its revisions newest first, and the form of the diff page."""
        name = request.path_params["name"]
        flow = self._deployed_or_404(name)
        history = self.client.flow_history(name)
        numbers = [r.revision for r in history]
        return self.page(
            request,
            "deployed_flow.html",
            flow=flow,
            history=history,
            diff_a=numbers[1] if len(numbers) > 1 else flow.current_revision,
            diff_b=flow.current_revision,
        )

    def revision(self, request: Request) -> HTMLResponse:
        """One revision: its facts, its DAG, its source as deployed, its runs."""
        name = request.path_params["name"]
        number = self._revision_number(name, request.path_params["rev"])
        flow = self._deployed_or_404(name)
        rev = self.client.get_revision(name, number)
        history = self.client.flow_history(name)
        numbers = sorted(r.revision for r in history)
        older = [n for n in numbers if n < number]
        newer = [n for n in numbers if n > number]
        runs = self.client.reads.list_runs_page(limit=PAGE_SIZE + 1, flow=name, revision=number)
        return self.page(
            request,
            "revision.html",
            flow=flow,
            rev=rev,
            run_count=next((r.runs for r in history if r.revision == number), None),
            previous=older[-1] if older else None,
            following=newer[0] if newer else None,
            svg=render_svg(dag_nodes(rev.definition or {}), lambda _n: None),
            runs=runs[:PAGE_SIZE],
            more_runs=len(runs) > PAGE_SIZE,
        )

    def revision_diff(self, request: Request) -> HTMLResponse:
        """Two revisions side by side (``?a=OLD&b=NEW``; ``b`` absent: the current one):
        their sources with the changed lines marked, and what changed node by node."""
        name = request.path_params["name"]
        flow = self._deployed_or_404(name)
        a, b = self._int(request, "a"), self._int(request, "b")
        if a is None:
            raise HTTPException(400, "choose the revisions to compare: ?a=N&b=M")
        if b is None:
            b = flow.current_revision
        old = self.client.get_revision(name, a)
        new = self.client.get_revision(name, b)
        diff = self.client.diff_revisions(name, a, b)
        rows = side_by_side(old.source or "", new.source or "")
        return self.page(
            request,
            "revision_diff.html",
            flow=flow,
            old=old,
            new=new,
            rows=rows,
            changed_rows=sum(1 for r in rows if r.changed),
            change_lines=describe.flow_change_lines(diff.change),
            breaking=diff.change.breaking,
            history=self.client.flow_history(name),
        )

    def health(self, request: Request) -> HTMLResponse:
        """The health advisor's report (:meth:`cyclone_flow.Client.health`): its warnings
        with their fixes, then the figures."""
        report = self.client.health()
        return self.page(request, "health.html", report=report)

    # -- actions ---------------------------------------------------------------------------

    async def form(self, request: Request) -> FormData:
        """The POST's form after the checks: same origin, the form token (the body's size
        is checked before, while it is read: :class:`~cyclone_flow.ui.guards.BodyLimit`)."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            raise HTTPException(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            if urlsplit(origin).netloc != request.headers.get("host", ""):
                raise HTTPException(403, "cross-origin request refused (Origin)")
        elif origin == "null":
            raise HTTPException(403, "cross-origin request refused (Origin: null)")
        form = await request.form(max_files=0, max_fields=1000)
        token = form.get("csrf")
        if not isinstance(token, str) or not secrets.compare_digest(token, self.csrf):
            raise HTTPException(403, "missing or wrong form token: reload the page")
        return form

    def _confirm(self, request: Request, form: FormData, what: str) -> HTMLResponse | None:
        if form.get("confirmed") == "1":
            return None
        fields = [(k, v) for k, v in form.multi_items() if k not in ("csrf", "confirmed")]
        return self.page(request, "confirm.html", what=what, action=request.url.path, fields=fields)

    def _back(self, request: Request, path: str, msg: str) -> RedirectResponse:
        base = str(request.scope.get("root_path", "")).rstrip("/")
        return RedirectResponse(f"{base}{path}?{urlencode({'msg': msg})}", status_code=303)

    async def cancel(self, request: Request) -> Response:
        form = await self.form(request)
        run_id = request.path_params["run_id"]
        await run_in_threadpool(self._run_or_404, run_id)  # nothing to confirm: 404 first
        confirm = self._confirm(request, form, f"cancel run {run_id} and every unfinished step")
        if confirm is not None:
            return confirm
        done = await run_in_threadpool(self.client.cancel, run_id, "cancelled from the dashboard")
        if not done:  # refused, as a refused retry or signal is
            return self.error(request, 409, f"run {run_id} already finished: not cancelled")
        return self._back(request, f"/runs/{run_id}", "run cancelled")

    async def retry(self, request: Request) -> Response:
        form = await self.form(request)
        run_id = request.path_params["run_id"]
        node = form.get("node") or None
        if node is not None and not isinstance(node, str):
            raise HTTPException(400, "node must be text")
        reset = await run_in_threadpool(self.client.retry, run_id, node)
        return self._back(request, f"/runs/{run_id}", f"retried: {', '.join(reset) or 'nothing'}")

    async def signal(self, request: Request) -> Response:
        form = await self.form(request)
        run_id = request.path_params["run_id"]
        name = form.get("name")
        text = form.get("payload") or "null"
        if not isinstance(name, str) or not isinstance(text, str):
            raise HTTPException(400, "name and payload must be text")
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise HTTPException(400, f"the payload is not JSON: {exc}") from None
        node = await run_in_threadpool(self.client.signal, run_id, name.strip(), payload)
        msg = f"signal {name!r} consumed by {node}" if node else f"signal {name!r} kept"
        return self._back(request, f"/runs/{run_id}", msg)

    async def schedule(self, request: Request) -> Response:
        form = await self.form(request)
        name = request.path_params["name"]
        verb = request.path_params["verb"]
        if verb not in ("pause", "resume", "trigger"):
            raise HTTPException(404, f"no schedule action {verb!r}: pause, resume or trigger")
        if await run_in_threadpool(self.client.get_schedule, name) is None:
            raise HTTPException(404, f"no schedule {name!r}")
        if verb == "trigger":
            confirm = self._confirm(request, form, f"submit a run of schedule {name!r} now")
            if confirm is not None:
                return confirm
            run_id = await run_in_threadpool(self.client.trigger_schedule, name)
            return self._back(request, f"/runs/{run_id}", f"run triggered from schedule {name!r}")
        if verb == "pause":
            confirm = self._confirm(request, form, f"pause schedule {name!r}")
            if confirm is not None:
                return confirm
            await run_in_threadpool(self.client.pause_schedule, name)
        else:
            await run_in_threadpool(self.client.resume_schedule, name)
        return self._back(request, "/", f"schedule {name!r} {verb}d")

    async def bulk(self, request: Request) -> Response:
        form = await self.form(request)
        action = form.get("action")
        ids = [v for v in form.getlist("run_id") if isinstance(v, str)]
        if action not in ("cancel", "retry") or not ids:
            raise HTTPException(400, "choose runs and an action (cancel or retry)")
        if len(ids) > PAGE_SIZE:
            raise HTTPException(400, f"at most {PAGE_SIZE} runs at once")
        confirm = self._confirm(request, form, f"{action} {len(ids)} run(s)")
        if confirm is not None:
            return confirm

        def apply() -> tuple[int, list[str]]:
            done, problems = 0, []
            for rid in ids:
                try:
                    if action == "cancel":
                        done += bool(self.client.cancel(rid, "cancelled from the dashboard"))
                    else:
                        self.client.retry(rid)
                        done += 1
                except CycloneError as exc:
                    problems.append(f"{rid}: {exc}")
            return done, problems

        done, problems = await run_in_threadpool(apply)
        msg = f"{action}: {done} of {len(ids)} run(s)" + (f"; {problems[0]}" if problems else "")
        return self._back(request, "/runs", msg)

    # -- errors ----------------------------------------------------------------------------

    def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.error(request, exc.status_code, str(exc.detail))

    def cyclone_error(self, request: Request, exc: Exception) -> Response:
        if isinstance(
            exc,
            RunNotFoundError | ScheduleNotFoundError | FlowNotDeployedError | RevisionNotFoundError,
        ):
            status = 404
        elif isinstance(exc, InputValidationError | PayloadTooLargeError | ConfigError):
            status = 400  # the request's fault
        else:
            status = 409  # the state's: a run already finished, a signal no node awaits
        return self.error(request, status, str(exc))

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/", self.overview, name="overview"),
            Route("/runs", self.runs, name="runs"),
            Route("/runs/{run_id}", self.run, name="run"),
            Route("/runs/{run_id}/live", self.run_live, name="run_live"),
            Route("/runs/{run_id}/{which:str}.json", self.run_output, name="run_json"),
            Route("/runs/{run_id}/steps/{node}", self.step, name="step"),
            Route("/runs/{run_id}/steps/{node}/output.json", self.step_output, name="step_json"),
            Route("/runs/{run_id}/steps/{node}/items", self.step_items, name="step_items"),
            Route("/flows", self.flows, name="flows"),
            Route("/health", self.health, name="health"),
            Route("/flows/deployed", self.deployed_flows),
            Route("/flows/deployed/{name}", self.deployed_flow, name="deployed_flow"),
            Route("/flows/deployed/{name}/diff", self.revision_diff, name="revision_diff"),
            Route("/flows/deployed/{name}/{rev}", self.revision, name="revision"),
            Route("/flows/{flow_id}", self.flow, name="flow"),
        ]
        if not self.read_only:
            post = ["POST"]
            routes += [
                Route("/runs/{run_id}/cancel", self.cancel, methods=post),
                Route("/runs/{run_id}/retry", self.retry, methods=post),
                Route("/runs/{run_id}/signal", self.signal, methods=post),
                Route("/actions/bulk", self.bulk, methods=post),
                Route("/schedules/{name}/{verb:str}", self.schedule, methods=post),
            ]
        return routes


def create_app(
    client: Client,
    *,
    read_only: bool = False,
    auth_token: str | None = None,
    poll_interval_s: float = 1.0,
    title: str = "cyclone-flow",
    trusted_hosts: Sequence[str] | None = None,
) -> ASGIApp:
    """The dashboard as an ASGI application over ``client`` (an application may mount it
    under a path of its own: links follow the ASGI ``root_path``).

    ``read_only``: no action route at all (any POST is answered 405). ``auth_token``:
    every request needs HTTP basic auth with this password (any user name) or
    ``Authorization: Bearer <token>``; None: no authentication (bind to loopback only).
    ``poll_interval_s``: how often a run's page refreshes its live part (seconds).
    ``trusted_hosts``: the ``Host`` values answered (patterns of
    :func:`~cyclone_flow.ui.guards.check_host_pattern`: ``name``, ``name:port``,
    ``*.domain``, ``*``), others get 400 (DNS rebinding); None: any host with
    ``auth_token``, else only the loopback names (:data:`~cyclone_flow.ui.guards.LOOPBACK_HOSTS`,
    any port). Raises ValueError for a malformed pattern.
    The client is the caller's: the app never shuts it down."""
    board = _Dashboard(client, read_only=read_only, poll_interval_s=poll_interval_s, title=title)
    routes = board.routes()
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: board.http_error, CycloneError: board.cyclone_error},
    )
    app.mount("/static", StaticFiles(directory=_HERE / "static"), name="static")
    app.state.dashboard = board
    if trusted_hosts is None:
        trusted_hosts = ("*",) if auth_token is not None else LOOPBACK_HOSTS
    guarded = _Guard(app, token=auth_token, read_only=read_only)
    # the body limit first: it holds for a refused request too, and closes the connection
    # of a refusal sent before the body is read
    return _SecurityHeaders(BodyLimit(TrustedHosts(guarded, trusted_hosts), MAX_BODY_BYTES))
