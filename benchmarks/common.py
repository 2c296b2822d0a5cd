"""Shared plumbing of the benchmark suite: the database (embedded Postgres with durability
on, or a given URL), fresh migrated schemas, the backlog written through the engine's
submit path, the worker process a benchmark times, server-side counters, and the machine.

Every benchmark module exposes ``run(env: Env, *, quick: bool) -> list[Result]``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import sql

from benchmarks.sql import qualified
from cyclone_flow import Client
from cyclone_flow.db.migrate import migrate
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.model import JSON, Flow

REPO = Path(__file__).resolve().parent.parent
FLOWS = Path(__file__).resolve().parent / "flows"
HANDLER_MODULE = "benchmarks.handlers"
DURABILITY = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


@dataclass
class Env:
    """The database a suite run uses. ``postmaster_pid`` is set when the server runs on this
    machine (its CPU time is then measured); ``settings`` are the server's durability and
    sizing settings as read at start; ``log_path`` is the embedded server's log file."""

    url: str
    embedded: bool
    settings: dict[str, str]
    server_version: str
    postmaster_pid: int | None
    log_path: Path | None = None  # the embedded server's log (benchmarks.profile reads it)


@dataclass
class Result:
    """One row of the suite's table.

    ``value`` is in ``unit`` (``steps/s``, ``runs/s``, ``jobs/s``, ``s``, ``MiB``, ``ms``);
    ``ratios`` maps a ceiling name to ``value / ceiling``; ``extra`` holds the details
    (counts, spans, CPU per step, peak RSS in MiB) that the JSON output carries."""

    name: str
    workers: int | None
    value: float | None
    unit: str
    note: str = ""
    peak_rss_mib: float | None = None
    ratios: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- database --------------------------------------------------------------------------------


@contextmanager
def database(url: str | None) -> Iterator[Env]:
    """The suite's database: ``url``, or an embedded Postgres (pgserver) in a temporary
    folder, removed afterwards, with fsync, synchronous_commit and full_page_writes set on
    (a durable commit is what the ceiling and the engine pay for). Settings are read back,
    never assumed."""
    if url is not None:
        yield _env(url, embedded=False)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    with tempfile.TemporaryDirectory(prefix="cyclone-bench-pg-") as tmp:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(Path(tmp) / "pgdata", cleanup_mode="stop")  # type: ignore[attr-defined]
        try:
            uri = str(server.get_uri())
            with psycopg.connect(uri, autocommit=True) as conn:
                for name, value in DURABILITY.items():
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            sql.Identifier(name), sql.Literal(value)
                        )
                    )
                conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.2)  # the postmaster signals the backends; new ones read it at start
            env = _env(uri, embedded=True)
            env.log_path = Path(tmp) / "pgdata" / "log"
            yield env
        finally:
            server.cleanup()


def _env(url: str, *, embedded: bool) -> Env:
    q = qualified("public")
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {str(r[0]): str(r[1]) for r in conn.execute(q["bench_settings"]).fetchall()}
        row = conn.execute(q["bench_backend_pid"]).fetchone()
        version_row = conn.execute("SELECT version()").fetchone()
    pid: int | None = None
    if row is not None:
        try:
            pid = psutil.Process(int(row[0])).ppid()
        except psutil.Error:
            pid = None  # a server on another machine: no CPU figures
    version = str(version_row[0]) if version_row else settings.get("server_version", "?")
    return Env(url, embedded, settings, version, pid)


def durability_ok(env: Env) -> bool:
    """True when every setting of :data:`DURABILITY` is on."""
    return all(env.settings.get(k) == v for k, v in DURABILITY.items())


def fresh_schema(env: Env, prefix: str) -> str:
    """Create and migrate a new schema ``<prefix>_<random>``; return its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(env.url) as conn:
        migrate(conn, name)
    return name


def drop_schema(env: Env, schema: str) -> None:
    """Drop a benchmark schema and everything in it."""
    with psycopg.connect(env.url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def schema_for(env: Env, prefix: str) -> Iterator[str]:
    """A fresh migrated schema for one measurement, dropped afterwards."""
    name = fresh_schema(env, prefix)
    try:
        yield name
    finally:
        drop_schema(env, name)


def load(name: str) -> Flow:
    """A benchmark flow from ``benchmarks/flows/<name>.yaml``."""
    return load_flow(FLOWS / f"{name}.yaml")


def submit_backlog(
    env: Env, schema: str, flow: Flow, inputs: Iterable[JSON], *, chunk: int = 1000
) -> tuple[int, float]:
    """Write one run per input through the engine's submit path (``Client.submit_tx``),
    ``chunk`` runs per transaction, with no worker running; return ``(runs, seconds)``."""
    count = 0
    started = time.perf_counter()
    client = Client(env.url, schema=schema, workers=1)
    try:
        batch: list[JSON] = []

        def flush() -> None:
            with client._pool.connection() as conn, conn.transaction():
                for item in batch:
                    client.submit_tx(conn, flow, item)
            batch.clear()

        for item in inputs:
            batch.append(item)
            count += 1
            if len(batch) >= chunk:
                flush()
        if batch:
            flush()
    finally:
        client.shutdown()
    return count, time.perf_counter() - started


# -- server-side counters --------------------------------------------------------------------


@dataclass(frozen=True)
class ServerCounters:
    """Commits and rollbacks of the database, and the server's CPU seconds (all its
    processes, None when the server is not on this machine)."""

    commits: int
    rollbacks: int
    cpu_s: float | None


def server_counters(env: Env) -> ServerCounters:
    """Read pg_stat_database (fresh snapshot) and the server processes' CPU time."""
    q = qualified("public")
    with psycopg.connect(env.url, autocommit=True) as conn:
        conn.execute(q["bench_stats_snapshot_clear"])
        row = conn.execute(q["bench_db_counters"]).fetchone()
    assert row is not None
    return ServerCounters(int(row[0]), int(row[1]), server_cpu_s(env))


def server_cpu_s(env: Env) -> float | None:
    """CPU seconds used so far by the postmaster, its live children and its waited-for
    (exited) children: the delta over a benchmark is the server's share of the work."""
    if env.postmaster_pid is None:
        return None
    try:
        master = psutil.Process(env.postmaster_pid)
        t = master.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in master.children():
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                continue
        return float(total)
    except psutil.Error:
        return None


# -- the worker process ----------------------------------------------------------------------


@dataclass
class WorkerReport:
    """What a worker process reports: wall seconds from ``start()`` until every run ended,
    its CPU seconds, peak RSS, RSS samples ``(seconds, runs left, bytes)``, and the
    server counters' deltas over its life (commits include the wait loop's polls)."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    rss_samples: list[tuple[float, int, int]]
    polls: int
    runs_failed: int
    commits: int
    rollbacks: int
    server_cpu_s: float | None


def run_worker(
    env: Env,
    schema: str,
    *,
    workers: int,
    timeout_s: float,
    rss_every_s: float = 0.0,
    options: dict[str, Any] | None = None,
    profile_to: str | None = None,
    processes: int = 1,
) -> WorkerReport:
    """Run ``python -m benchmarks.worker`` (a ``Client(workers=N)`` on ``schema``) until no
    run of the schema is running; raise RuntimeError if it fails or times out.

    ``processes``: run that many such worker processes at once (what ``cyclone-flow
    worker --processes N`` runs), each its own client; the report then adds their CPU
    seconds and polls, and takes the longest wall time, the largest peak RSS (per
    process) and the first one's RSS samples. ``profile_to``: sample the process with
    py-spy (raw collapsed stacks into that file; one process only).
    """
    if processes > 1 and profile_to is not None:
        raise ValueError("profile_to samples one worker process: use processes=1")
    spec = {
        "url": env.url,
        "schema": schema,
        "workers": workers,
        "timeout_s": timeout_s,
        "rss_every_s": rss_every_s,
        "options": options or {},
    }
    env_vars = dict(os.environ)
    env_vars["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    cmd = [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)]
    if profile_to is not None:
        pyspy = Path(sys.executable).parent / "py-spy"
        cmd = [
            str(pyspy), "record", "--rate", "250", "--format", "raw", "--nonblocking",
            "-o", profile_to, "--", *cmd,
        ]  # fmt: skip
    before = server_counters(env)
    procs = [
        subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env_vars,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    outputs: list[tuple[int, str, str]] = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s + 60)
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    after = server_counters(env)
    reports = []
    for code, out, err in outputs:
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            raise RuntimeError(f"benchmark worker failed (exit {code}):\n{err[-4000:]}")
        reports.append(json.loads(lines[-1]))
    data = reports[0]
    return WorkerReport(
        wall_s=max(r["wall_s"] for r in reports),
        cpu_s=sum(r["cpu_s"] for r in reports),
        peak_rss_mib=max(r["peak_rss_kib"] for r in reports) / 1024,
        rss_samples=[(s[0], s[1], s[2]) for s in data["rss_samples"]],
        polls=sum(r["polls"] for r in reports),
        runs_failed=max(r["runs_failed"] for r in reports),
        commits=after.commits - before.commits,
        rollbacks=after.rollbacks - before.rollbacks,
        server_cpu_s=(
            None if after.cpu_s is None or before.cpu_s is None else after.cpu_s - before.cpu_s
        ),
    )


def step_span(env: Env, schema: str) -> tuple[int, float]:
    """``(completed steps, seconds from the first claim to the last completion)``."""
    with psycopg.connect(env.url, autocommit=True) as conn:
        row = conn.execute(qualified(schema)["bench_step_span"]).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0.0)


def run_span(env: Env, schema: str) -> tuple[int, float]:
    """``(completed runs, seconds from the first claim to the last run finish)``."""
    with psycopg.connect(env.url, autocommit=True) as conn:
        row = conn.execute(qualified(schema)["bench_run_span"]).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0.0)


def per_step_details(report: WorkerReport, steps: int) -> dict[str, Any]:
    """CPU per step (worker, server) in ms and commits per step, from a worker's report."""
    steps = max(steps, 1)
    commits = max(0, report.commits - report.polls)  # the wait loop's polls commit too
    out: dict[str, Any] = {
        "worker_cpu_ms_per_step": round(1000 * report.cpu_s / steps, 3),
        "commits_per_step": round(commits / steps, 3),
        "rollbacks_per_step": round(report.rollbacks / steps, 3),
        "worker_wall_s": round(report.wall_s, 3),
    }
    if report.server_cpu_s is not None:
        out["server_cpu_ms_per_step"] = round(1000 * report.server_cpu_s / steps, 3)
    return out


# -- the machine -----------------------------------------------------------------------------


def machine(env: Env) -> dict[str, Any]:
    """Cores, CPU model, RAM, load average, Python, psycopg and Postgres versions."""
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_1m_at_start": round(load[0], 2),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "postgres": env.server_version.split(" on ")[0],
        "embedded": env.embedded,
        "durability": {k: env.settings.get(k, "?") for k in (*DURABILITY, "wal_sync_method")},
    }


def ratio(value: float | None, ceiling: float | None) -> float | None:
    """``value / ceiling`` rounded, or None when either is missing."""
    if not value or not ceiling:
        return None
    return round(value / ceiling, 3)


def pick(sizes: Sequence[int], quick: bool) -> int:
    """``sizes[1]`` in quick mode, else ``sizes[0]``."""
    return sizes[1] if quick else sizes[0]
