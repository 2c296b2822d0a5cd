"""Run the benchmark suite: ``python -m benchmarks [--json | --markdown] [--quick]
[--database-url URL] [--only NAME ...] [--workers N ...] [--processes N ...]
[--soak [--soak-steps N]]``.

Without a URL it starts an embedded Postgres (pgserver) in a temporary folder with fsync,
synchronous_commit and full_page_writes on, and prints the settings it read back. Every
measurement gets a fresh migrated schema. Prints the machine, a table of results (each
engine figure also as a ratio to the raw-SQL ceiling of the same run at the same
connection count) and the issue's targets; ``--json`` prints one JSON document instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the worker processes import benchmarks.handlers from here
    sys.path.insert(0, str(REPO))

from benchmarks import (  # noqa: E402
    ceiling,
    chain,
    exactly_once,
    fanout,
    limits,
    noop,
    producer,
    soak,
    step_logs,
)
from benchmarks.common import Env, Result, database, durability_ok, machine, ratio  # noqa: E402

NAMES = (
    "ceiling",
    "noop",
    "noop_async",
    "chain",
    "fanout",
    "exactly_once",
    "latency",
    "producer",
    "limits",
    "step_logs",
    "soak",
)
DEFAULT = (
    "ceiling",
    "noop",
    "noop_async",
    "chain",
    "fanout",
    "exactly_once",
    "latency",
    "producer",
)
# ceilings each engine figure is divided by (same connection count as the engine's workers)
RATIO_CEILINGS = ("1/tx", "batch50", "1/tx idx", "batch50 idx")


def latency_available() -> bool:
    """True when this build has ``benchmarks/latency.py`` (enqueue-to-claim latency)."""
    return importlib.util.find_spec("benchmarks.latency") is not None


def run_latency(env: Env, quick: bool) -> list[Result]:
    """Enqueue-to-claim latency on an idle queue, from ``benchmarks.latency.run``."""
    module = importlib.import_module("benchmarks.latency")
    data: dict[str, Any] = module.run(env.url, samples=20 if quick else 500)
    # the figure is the notify mode's claim_ms (submit() returned -> handler entered)
    claim: dict[str, float] = data.get("modes", {}).get("notify", {}).get("claim_ms", {})
    p50 = claim.get("p50")
    note = ", ".join(f"{k}={v:.3g}" for k, v in claim.items() if k.startswith("p"))
    others = [
        f"{mode} p50={stats['claim_ms']['p50']:.3g}"
        for mode, stats in data.get("modes", {}).items()
        if mode != "notify" and "claim_ms" in stats
    ]
    note = "; ".join([note, *others]) if others else note
    return [Result("enqueue-to-claim latency", None, p50, "ms (p50)", note=note, extra=data)]


def add_ratios(results: list[Result]) -> None:
    """Divide each engine figure's steps/s by the ceilings measured at the same number of
    connections (the closest measured when that count was not run)."""
    ceilings: dict[tuple[str, int], float] = {}
    for r in results:
        if r.name.startswith("ceiling ") and r.value and r.workers:
            ceilings[(r.name.removeprefix("ceiling "), r.workers)] = r.value
    for r in results:
        steps = r.extra.get("steps_per_s")
        if r.name.startswith("ceiling") or not steps or not r.workers:
            continue
        for mode in RATIO_CEILINGS:
            counts = [n for (m, n) in ceilings if m == mode]
            if not counts:
                continue
            n = min(counts, key=lambda c: abs(c - (r.workers or 0)))
            value = ratio(steps, ceilings[(mode, n)])
            if value is not None:
                r.ratios[mode] = value


def targets(results: list[Result]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured figure and whether it is met."""

    def find(prefix: str, workers: int | None = None) -> Result | None:
        for r in results:
            if r.name.startswith(prefix) and (workers is None or r.workers == workers):
                return r
        return None

    out: list[dict[str, Any]] = []

    def add(target: str, value: float | None, met: bool | None, shown: str) -> None:
        out.append({"target": target, "measured": shown, "value": value, "met": met})

    noop8 = find("no-op steps", 8)
    if noop8 and noop8.value:
        add("no-op steps at 8 workers >= 6,000 steps/s", noop8.value, noop8.value >= 6000,
            f"{noop8.value:,.0f} steps/s")  # fmt: skip
        share = noop8.ratios.get("batch50")
        if share is not None:
            add("no-op at 8 workers >= 25% of the batch50 ceiling", share, share >= 0.25,
                f"{share:.1%}")  # fmt: skip
    multi = [r for r in results if r.name == "no-op, 2 processes" and r.value]
    if multi:
        best = max(multi, key=lambda r: r.value or 0.0)
        value = best.value or 0.0
        add("no-op steps with 2 processes >= 5,500 steps/s", value, value >= 5500,
            f"{value:,.0f} steps/s ({best.note})")  # fmt: skip
    once = find("exactly-once")
    if once and once.ratios.get("1/tx") is not None:
        share = once.ratios["1/tx"]
        add("exactly-once >= 80% of the 1/tx ceiling", share, share >= 0.8, f"{share:.1%}")
    ch = find("3-node chain")
    if ch and ch.value:
        add("3-node chain >= 1,000 runs/s", ch.value, ch.value >= 1000, f"{ch.value:,.0f} runs/s")
    fo = find("fan-out")
    if fo:
        if fo.value is None:
            add("fan-out of 10,000 items < 10 s", None, None, fo.note)
        else:
            add("fan-out of 10,000 items < 10 s", fo.value, fo.value < 10, f"{fo.value:.2f} s")
    lat = find("enqueue-to-claim")
    if lat and lat.value is not None:
        add("enqueue-to-claim p50 < 2 ms", lat.value, lat.value < 2, f"{lat.value:.2f} ms")
    for prefix, goal, unit in (("bulk enqueue", 25_000, "jobs/s"),
                               ("bulk submit 3-node", 8_000, "runs/s")):  # fmt: skip
        bulk = find(prefix)
        if bulk and bulk.value:
            add(f"{prefix} >= {goal:,} {unit}", bulk.value, bulk.value >= goal,
                f"{bulk.value:,.0f} {unit}")  # fmt: skip
            share = bulk.extra.get("ceiling_ratio")
            if share is not None:
                add(f"{prefix} >= 50% of its raw-SQL ceiling", share, share >= 0.5,
                    f"{share:.1%}")  # fmt: skip
    call = find("enqueue call")
    if call and call.value is not None:
        add("one enqueue call p50 <= 1.5 ms", call.value, call.value <= 1.5,
            f"{call.value:.2f} ms")  # fmt: skip
    for prefix, most in (
        ("no-op, global limit 40", 0.25),
        ("no-op, 1,000 keys at limit 1", 0.15),
        ("no-op, rate limit above the rate", 0.15),
    ):
        lim = find(prefix)
        share = lim.extra.get("vs_unlimited") if lim else None
        if share is not None:
            add(f"{prefix} costs at most {most:.0%}", share, share >= 1 - most,
                f"{share:.1%} of the unlimited figure")  # fmt: skip
    sk = find("soak")
    if sk and sk.value is not None:
        add("flat RSS over the soak", sk.value, sk.value < soak.FLAT_MIB, sk.note)
    return out


def print_report(info: dict[str, Any], results: list[Result], goals: list[dict[str, Any]]) -> None:
    """The machine, the results table and the targets, with rich."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.width = max(console.width, 150)
    dur = info["durability"]
    console.print(
        f"[bold]machine[/]: {info['cores']} cores, {info['cpu']}, {info['ram_gib']} GiB RAM, "
        f"load {info['load_avg_1m_at_start']} at start; Python {info['python']}, psycopg "
        f"{info['psycopg']}; {info['postgres']} ({'embedded' if info['embedded'] else 'given URL'})"
    )
    console.print("[bold]durability[/]: " + ", ".join(f"{k}={v}" for k, v in dur.items()))
    table = Table(title="cyclone-flow benchmarks")
    for col, justify in [
        ("benchmark", "left"), ("workers", "right"), ("result", "right"), ("unit", "left"),
        ("÷1/tx", "right"), ("÷b50", "right"), ("÷1/tx idx", "right"),
        ("÷b50 idx", "right"), ("RSS MiB", "right"), ("notes", "left"),
    ]:  # fmt: skip
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(
            r.name,
            "" if r.workers is None else str(r.workers),
            "-" if r.value is None else f"{r.value:,.1f}",
            r.unit,
            *(f"{r.ratios[m]:.2f}" if m in r.ratios else "" for m in RATIO_CEILINGS),
            "" if r.peak_rss_mib is None else f"{r.peak_rss_mib:.0f}",
            r.note or _brief(r),
        )
    console.print(table)
    if goals:
        gt = Table(title="targets (issue 8)")
        for col in ("target", "measured", "met"):
            gt.add_column(col)
        for g in goals:
            met = "-" if g["met"] is None else ("yes" if g["met"] else "NO")
            gt.add_row(g["target"], g["measured"], met)
        console.print(gt)


def markdown(info: dict[str, Any], results: list[Result]) -> str:
    """The results as a Markdown table (for README.md), headed by the machine."""
    lines = [
        f"{info['cores']} cores ({info['cpu']}), {info['ram_gib']} GiB RAM, load "
        f"{info['load_avg_1m_at_start']} at start, {info['postgres']}, "
        + ", ".join(f"{k}={v}" for k, v in info["durability"].items()),
        "",
        "| benchmark | workers | result | ÷ 1/tx ceiling | ÷ batch50 ceiling | peak RSS MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        shown = r.note if r.value is None else f"{r.value:,.1f} {r.unit}"
        cells = [f"{r.ratios[m]:.3f}" if m in r.ratios else "" for m in ("1/tx", "batch50")]
        rss = "" if r.peak_rss_mib is None else f"{r.peak_rss_mib:.0f}"
        workers = r.workers or ""
        lines.append(f"| {r.name} | {workers} | {shown} | {cells[0]} | {cells[1]} | {rss} |")
    return "\n".join(lines)


def _brief(r: Result) -> str:
    """Per step: commits, CPU ms of the worker process and of the Postgres server."""
    e = r.extra
    if "commits_per_job" in e:
        cpu = e.get("server_cpu_ms_per_job", "?")
        return f"{e['commits_per_job']} commits, PG {cpu} ms CPU /job"
    if "commits_per_step" in e:
        return (
            f"{e['commits_per_step']} commits, py {e['worker_cpu_ms_per_step']} + "
            f"PG {e.get('server_cpu_ms_per_step', '?')} ms CPU /step"
        )
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--database-url", help="use this Postgres instead of an embedded one")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME",
                        help=f"run only these: {', '.join(NAMES)}")  # fmt: skip
    parser.add_argument("--soak", action="store_true", help="also run the memory soak")
    parser.add_argument(
        "--soak-steps",
        type=int,
        default=None,
        help=f"steps of the soak (default {soak.STEPS:,}; --quick 2,000)",
    )
    parser.add_argument(
        "--workers",
        nargs="+",
        type=int,
        default=None,
        metavar="N",
        help="worker / connection counts of noop and ceiling (default 1 4 8)",
    )
    parser.add_argument(
        "--processes",
        nargs="+",
        type=int,
        default=[1],
        metavar="N",
        help="worker process counts of noop, each with every --workers count (default 1)",
    )
    args = parser.parse_args(argv)
    if any(p < 1 for p in args.processes):
        parser.error("--processes: each count must be a whole number >= 1")
    names = list(args.only or DEFAULT)
    if args.soak and "soak" not in names:
        names.append("soak")
    if "latency" in names and not latency_available():
        names.remove("latency")

    counts = (2,) if args.quick else (1, 4, 8)  # --quick: a smoke run, one count
    if args.workers:
        counts = tuple(args.workers)
    runners: dict[str, Callable[[Env, bool], list[Result]]] = {
        "ceiling": lambda env, quick: ceiling.run(env, quick=quick, connections=counts),
        "noop": lambda env, quick: noop.run(
            env, quick=quick, workers=counts, processes=tuple(args.processes)
        ),
        "noop_async": lambda env, quick: noop.run_async(env, quick=quick, workers=counts),
        "chain": lambda env, quick: chain.run(env, quick=quick),
        "fanout": lambda env, quick: fanout.run(env, quick=quick),
        "exactly_once": lambda env, quick: exactly_once.run(env, quick=quick),
        "latency": run_latency,
        "producer": lambda env, quick: producer.run(env, quick=quick),
        "limits": lambda env, quick: limits.run(
            env, quick=quick, workers=args.workers[0] if args.workers else None
        ),
        "step_logs": lambda env, quick: step_logs.run(env, quick=quick),
        "soak": lambda env, quick: soak.run(env, quick=quick, steps=args.soak_steps),
    }
    results: list[Result] = []
    started = time.perf_counter()
    with database(args.database_url) as env:
        info = machine(env)
        if not durability_ok(env):
            print(
                "warning: durability is not fully on ("
                + ", ".join(f"{k}={v}" for k, v in info["durability"].items())
                + "): commits are cheaper than in production",
                file=sys.stderr,
            )
        for name in NAMES:
            if name not in names:
                continue
            print(f"running {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            got = runners[name](env, args.quick)
            results.extend(got)
            for r in got:
                shown = "-" if r.value is None else f"{r.value:,.1f}"
                print(f"  {r.name} (workers {r.workers}): {shown} {r.unit} {r.note}",
                      file=sys.stderr, flush=True)  # fmt: skip
            print(f"  ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
    add_ratios(results)
    goals = targets(results)
    if args.json:
        doc = {
            "machine": info,
            "quick": args.quick,
            "duration_s": round(time.perf_counter() - started, 1),
            "results": [r.as_dict() for r in results],
            "targets": goals,
        }
        print(json.dumps(doc, indent=2))
    elif args.markdown:
        print(markdown(info, results))
    else:
        print_report(info, results, goals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
