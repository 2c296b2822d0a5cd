"""Profile the engine on one benchmark path: ``python -m benchmarks.profile [--scenario
noop|chain|exactly_once|fanout|limits_global|limits_keys|limits_rate] [--workers 8]
[--runs N] [--database-url URL] [--no-pyspy] [--json]`` (for ``fanout``, one run of
``--runs`` items; the ``limits_*`` scenarios are the limited cases of
``benchmarks/limits.py``).

First the latency of one round trip (``SELECT 1``), then two passes over the same
backlog size, each in a fresh schema:

1. **Timing pass**: the worker process runs under py-spy (sampling at 250 Hz; samples of
   threads blocked on the network, a lock or the GIL are left out, so a sample is CPU time
   of that thread), while this process samples ``pg_stat_activity`` every 10 ms (what the
   server's client backends wait on: ``ClientRead`` = waiting for Python, ``Lock`` = row
   or transaction locks, ``IO``/``LWLock:WAL*`` = the commit's flush). Reports steps/s,
   CPU ms per step of the worker and of the server, Python time per step by thread and by
   engine function, and the wait-event shares.
2. **Statement pass** (embedded server only): every statement is logged with its server
   duration (``log_min_duration_statement = 0`` on the database for the worker's
   sessions); the log is parsed into statements per step, round trips per step and server
   ms per step for each named statement (``cyclone_flow/db/sql``), ``BEGIN`` and
   ``COMMIT``. Logging slows the server: this pass counts, the first one times.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import sql as bench_sql  # noqa: E402
from benchmarks.common import (  # noqa: E402
    Env,
    WorkerReport,
    database,
    load,
    per_step_details,
    run_span,
    run_worker,
    schema_for,
    step_span,
    submit_backlog,
)
from cyclone_flow.db import queries  # noqa: E402

SCENARIOS = {  # flow, steps per run, default runs
    "noop": ("noop", 1, 5_000),
    "chain": ("chain", 3, 2_000),
    "exactly_once": ("exactly_once", 1, 5_000),
    "fanout": ("fanout", 1, 5_000),  # one run of N items (--runs: the item count)
    # flow control (benchmarks/limits.py): the limited claim's path
    "limits_global": ("limits_global", 1, 5_000),
    "limits_keys": ("limits_keys", 1, 5_000),
    "limits_rate": ("limits_rate", 1, 5_000),
}
LIMIT_KEYS = 1000  # the keys of limits_keys, as benchmarks/limits.py
RATE_HZ = 250
ROLES = {  # a thread's root function -> its role
    "_work_loop": "worker threads",
    "_claim_loop": "claim loop",
    "_heartbeat_loop": "heartbeat loop",
    "_maintenance_loop": "maintenance loop",
    "_listen_loop": "listener",
    "_run": "psycopg_pool workers",
    "main": "main thread (benchmark wait loop)",
}
# engine functions whose inclusive CPU time the profile reports (py-spy frame names)
KEY_FUNCTIONS = (
    "Executor.execute",
    "Executor._prepare",
    "HandlerResolver.resolve",
    "Inputs.resolve_input",
    "Inputs.run_input",
    "Inputs.upstream_output",
    "Executor._call",
    "Executor._encode_output",
    "InlineSink.complete",
    "BatchSink._transact",
    "CompletionTx.open",
    "complete_step",
    "CompletionTx.commit",
    "Settler.committed",
    "Settler.report",
    "Reporter.report",
    "Client._publish",
    "Publisher.publish",
    "call_hook",
    "Worker._claim_once",
    "claim",
    "claim_limited",
    "Heartbeat.run_once",
    "Worker._dispatch",
    "ConnectionPool.getconn",
    "ConnectionPool.putconn",
    "Connection.execute",
    "Connection.__exit__",
    "Transaction.__exit__",
    "Cursor.fetchall",
    "Cursor.fetchone",
    "render",
    "dumps",
    "loads",
)


# -- pg_stat_activity sampling ---------------------------------------------------------------


class WaitSampler(threading.Thread):
    """Samples what the database's other client backends do every ``period`` seconds."""

    def __init__(self, url: str, period: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.period = period
        self.stop = threading.Event()
        self.counts: Counter[str] = Counter()
        self.samples = 0

    def run(self) -> None:
        q = bench_sql.qualified("public")["bench_wait_sample"]
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(self.period):
                rows = conn.execute(q, prepare=True).fetchall()
                self.samples += 1
                for state, wtype, event in rows:
                    if state == "idle":
                        key = "idle (between transactions)"
                    elif state == "idle in transaction":
                        key = "idle in transaction (waiting for the client mid-transaction)"
                    elif wtype is None:
                        key = "active: on CPU"
                    else:
                        key = f"active: {wtype}:{event}"
                    self.counts[key] += 1


# -- py-spy ----------------------------------------------------------------------------------


def parse_pyspy(path: Path) -> tuple[Counter[str], Counter[str], Counter[str], int]:
    """Collapsed stacks -> (samples by thread role, inclusive samples by key function,
    self samples by leaf module, total samples)."""
    roles: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        names = [f.split(" (", 1)[0] for f in frames]
        role = "other"
        for name in names:
            short = name.rsplit(".", 1)[-1]
            if short in ROLES:
                role = ROLES[short]
                break
        if any("importlib" in f for f in frames):
            role = "startup imports (not per step)"
        roles[role] += count
        seen = set()
        for name in names:
            for key in KEY_FUNCTIONS:
                if key not in seen and (name == key or name.endswith("." + key)):
                    inclusive[key] += count
                    seen.add(key)
        leaf[_module_of(frames[-1])] += count
    return roles, inclusive, leaf, total


def _module_of(frame: str) -> str:
    m = re.search(r"\(([^:)]+)", frame)
    path = m.group(1) if m else frame
    for marker in ("site-packages/", "python3.11/", "i8/", "/"):
        if marker in path:
            path = path.split(marker, 1)[1] if marker != "/" else path
            break
    parts = path.replace(".py", "").split("/")
    if parts[0] in ("psycopg", "psycopg_pool", "cyclone_flow") and len(parts) > 1:
        return "/".join(parts[:2])
    return parts[0]


# -- statement log ---------------------------------------------------------------------------

_ENTRY = re.compile(
    r"^\S+ \S+ \S+ \[(\d+)\] LOG:  duration: ([0-9.]+) ms  (statement|parse|bind|execute)"
    r"(?: [^:]*)?: (.*)$"
)
_PLACEHOLDER_LOG = re.compile(r"\$\d+")
_PLACEHOLDER_PY = re.compile(r"%\(\w+\)s")


def _normal(text: str) -> str:
    return " ".join(text.split())


def statement_names(schema: str) -> dict[str, str]:
    """Normalised SQL (placeholders as ``?``) -> statement name, for the engine's and the
    suite's statements on ``schema``."""
    out: dict[str, str] = {}
    for source in (queries.qualified(schema), bench_sql.qualified(schema)):
        for name, text in source.items():
            if name in ("session_begin", "session_commit"):
                continue  # BEGIN and COMMIT are counted by their words, as psycopg's
            out[_normal(_PLACEHOLDER_PY.sub("?", text.replace("%%", "%")))] = name
    return out


def parse_log(text: str, schema: str) -> tuple[Counter[str], dict[str, float]]:
    """Server log -> (round trips per statement name, server ms per statement name).
    A simple-protocol ``statement`` or an extended-protocol ``execute`` is one round trip;
    parse, bind and execute durations add up to the statement's server time. A ``COMMIT``
    is named after the first statement of its transaction (``COMMIT (run_lock)``): a
    transaction that wrote must flush the WAL, a read-only one need not."""
    names = statement_names(schema)
    entries: list[tuple[str, float, str, list[str]]] = []
    for line in text.splitlines():
        m = _ENTRY.match(line)
        if m:
            entries.append((m.group(1), float(m.group(2)), m.group(3), [m.group(4)]))
        elif line.startswith("\t") and entries:
            entries[-1][3].append(line[1:])
        elif entries and not line.startswith("20"):
            entries[-1][3].append(line)
    trips: Counter[str] = Counter()
    server_ms: dict[str, float] = defaultdict(float)
    first_in_tx: dict[str, str | None] = {}
    for pid, ms, phase, lines in entries:
        sql_text = _normal(_PLACEHOLDER_LOG.sub("?", "\n".join(lines)))
        name = names.get(sql_text)
        if name is None:
            word = sql_text.split(" ", 1)[0].upper()
            name = word if word in ("BEGIN", "COMMIT", "ROLLBACK") else sql_text[:60]
        if name == "BEGIN":
            first_in_tx[pid] = None
        elif name in ("COMMIT", "ROLLBACK"):
            name = f"{name} ({first_in_tx.pop(pid, None) or '?'})"
        elif pid in first_in_tx and first_in_tx[pid] is None:
            first_in_tx[pid] = name
        server_ms[name] += ms
        if phase in ("statement", "execute"):
            trips[name] += 1
    return trips, server_ms


# -- the passes ------------------------------------------------------------------------------


def round_trip_ms(env: Env, count: int = 2000) -> dict[str, float]:
    """Median and p90 milliseconds of one round trip (a prepared ``SELECT 1`` on one
    autocommit connection, one thread): the floor under every statement of a step."""
    times = []
    with psycopg.connect(env.url, autocommit=True) as conn:
        for _ in range(count):
            t0 = time.perf_counter()
            conn.execute("SELECT 1", prepare=True).fetchone()
            times.append(1000 * (time.perf_counter() - t0))
    times.sort()
    return {"p50": round(times[len(times) // 2], 4), "p90": round(times[len(times) * 9 // 10], 4)}


def _backlog(env: Env, schema: str, scenario: str, runs: int) -> None:
    flow_name, _, _ = SCENARIOS[scenario]
    if scenario == "exactly_once":
        with psycopg.connect(env.url, autocommit=True) as conn:
            conn.execute(bench_sql.qualified(schema)["bench_ledger_create"])
        inputs: Iterable[Any] = ({"schema": schema, "amount": i} for i in range(runs))
    elif scenario == "fanout":
        inputs = [{"items": runs}]
    elif scenario == "limits_keys":
        inputs = ({"i": i, "k": i % LIMIT_KEYS} for i in range(runs))
    else:
        inputs = ({"i": i} for i in range(runs))
    submit_backlog(env, schema, load(flow_name), inputs)


def timing_pass(env: Env, scenario: str, workers: int, runs: int, pyspy: bool) -> dict[str, Any]:
    """Run the worker under py-spy with the wait sampler; return the figures."""
    with schema_for(env, "prof_time") as schema, tempfile.TemporaryDirectory() as tmp:
        _backlog(env, schema, scenario, runs)
        out = Path(tmp) / "pyspy.txt"
        sampler = WaitSampler(env.url)
        sampler.start()
        report: WorkerReport = run_worker(
            env, schema, workers=workers, timeout_s=1800, profile_to=str(out) if pyspy else None
        )
        sampler.stop.set()
        sampler.join()
        steps, step_s = step_span(env, schema)
        done_runs, run_s = run_span(env, schema)
        result: dict[str, Any] = {
            "steps": steps,
            "steps_per_s": round(steps / step_s, 1) if step_s else None,
            "runs_per_s": round(done_runs / run_s, 1) if run_s else None,
            **per_step_details(report, steps),
            "peak_rss_mib": round(report.peak_rss_mib, 1),
        }
        samples = max(sampler.samples, 1)
        result["wait_events_avg_backends"] = {
            k: round(v / samples, 3) for k, v in sampler.counts.most_common()
        }
        if pyspy and out.exists():
            roles, inclusive, leaf, total = parse_pyspy(out)
            per_step = 1000.0 / RATE_HZ / max(steps, 1)  # ms of CPU per sample per step
            result["pyspy_samples"] = total
            result["python_ms_per_step_total"] = round(total * per_step, 3)
            result["python_ms_per_step_by_thread"] = {
                k: round(v * per_step, 3) for k, v in roles.most_common()
            }
            result["python_ms_per_step_by_function"] = {
                k: round(v * per_step, 3) for k, v in inclusive.most_common()
            }
            result["python_ms_per_step_by_leaf_module"] = {
                k: round(v * per_step, 3) for k, v in leaf.most_common(15)
            }
        return result


def statement_pass(env: Env, scenario: str, workers: int, runs: int) -> dict[str, Any] | None:
    """Run the worker with every statement logged; return per-step statement figures."""
    if env.log_path is None:
        return None
    with schema_for(env, "prof_stmt") as schema:
        _backlog(env, schema, scenario, runs)
        with psycopg.connect(env.url, autocommit=True) as conn:
            dbname = conn.info.dbname
            ident = sql.Identifier(dbname)
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET log_min_duration_statement = 0").format(ident)
            )
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET log_parameter_max_length = 0").format(ident)
            )
        offset = env.log_path.stat().st_size
        try:
            report = run_worker(env, schema, workers=workers, timeout_s=1800)
        finally:
            with psycopg.connect(env.url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RESET log_min_duration_statement").format(ident)
                )
                conn.execute(
                    sql.SQL("ALTER DATABASE {} RESET log_parameter_max_length").format(ident)
                )
        with env.log_path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
        steps, step_s = step_span(env, schema)
    trips, server_ms = parse_log(text, schema)
    polls = trips.pop("bench_runs_left", 0)
    server_ms.pop("bench_runs_left", None)
    n = max(steps, 1)
    total_trips = sum(trips.values())
    return {
        "steps": steps,
        "steps_per_s_with_logging": round(steps / step_s, 1) if step_s else None,
        "round_trips_per_step": round(total_trips / n, 3),
        "commits_per_step": round(
            sum(v for k, v in trips.items() if k.startswith("COMMIT")) / n, 3
        ),
        "server_ms_per_step": round(sum(server_ms.values()) / n, 3),
        "per_statement": {
            name: {
                "per_step": round(count / n, 3),
                "server_ms_per_call": round(server_ms[name] / count, 4) if count else None,
                "server_ms_per_step": round(server_ms[name] / n, 4),
            }
            for name, count in trips.most_common()
        },
        "wait_loop_polls": polls,
        "worker_wall_s": round(report.wall_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="noop")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--database-url")
    parser.add_argument("--no-pyspy", action="store_true", help="skip the py-spy sampling")
    parser.add_argument("--skip-statements", action="store_true", help="skip the log pass")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    runs = args.runs or SCENARIOS[args.scenario][2]
    pyspy = not args.no_pyspy and (Path(sys.executable).parent / "py-spy").exists()
    if not args.no_pyspy and not pyspy:
        print("py-spy not found next to python: pip install py-spy", file=sys.stderr)
    t0 = time.perf_counter()
    with database(args.database_url) as env:
        trip = round_trip_ms(env)
        timing = timing_pass(env, args.scenario, args.workers, runs, pyspy)
        statements = None
        if not args.skip_statements:
            statements = statement_pass(env, args.scenario, args.workers, runs)
    doc = {
        "scenario": args.scenario,
        "workers": args.workers,
        "runs": runs,
        "round_trip_ms": trip,
        "timing": timing,
        "statements": statements,
        "duration_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
