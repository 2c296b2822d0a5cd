"""Lint speed on big legal flow files and on files lint must refuse early:
``python -m benchmarks.lint [--json] [--repeat N] [--cli]``. No database.

Cases, each file written to a temporary folder and linted with
:func:`cyclone_flow.flowfile.lint_paths` in this process ``--repeat`` times (default 5):

- ``dense``: 2,000 nodes, each with a ``call``, ``needs`` on 6 earlier nodes, an ``input``
  of a reference to each of them and one to the run input, a ``timeout`` and a ``retry``
  (about 1.1 MB, 12,000 edges);
- ``wide``: one node whose ``input`` is a 50,000-key mapping (about 1 MB);
- ``10 MiB``: a legal flow of 10 MiB (over the file cap: E000 before reading);
- ``value cap``: a 2 MiB flow whose ``input`` is a list of 400,000 numbers (E001 at the
  200,001st value: reading stops there);
- ``truncated``: a 2 MiB flow whose ``input`` lists 120,000 numbers and whose last line
  opens a list it never closes; libyaml rejects it at its end. ruamel.yaml's
  pure-Python parser reads again only a file of up to 256 KiB that libyaml rejects
  (``source.RUAMEL_FALLBACK_MAX_CHARS``); this one gets libyaml's error (before: ruamel
  read it, about 11 s, the slowest file lint could be made to read under the caps);
- ``cut off``: a 2 MiB dense flow cut inside a quoted string of its last node;
- ``broken last``: the ``dense`` flow whose last line lacks its closing brace (1.1 MB);
- ``examples``: every flow of ``examples/flows`` in one call.

Printed per case: the problems found, the fastest and the median wall seconds, and the
CPU seconds of the fastest run. ``--cli`` also times ``cyclone-flow lint FILE`` as a
subprocess (interpreter start and imports included). The issue's target: ``dense`` and
``wide`` under 2 s. The machine may be shared: the minimum is the figure to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cyclone_flow.flowfile import lint_paths, read  # noqa: E402

TARGET_S = 2.0
MIB = 1024 * 1024


def dense_flow(nodes: int = 2000, fan_in: int = 6, seed: int = 1) -> str:
    """A flow of ``nodes`` nodes; each needs ``fan_in`` random earlier ones and refers to
    each of them (and to the run input) in its ``input``. Lints clean."""
    rng = random.Random(seed)
    lines = ["name: dense", "description: a generated flow with many edges", "nodes:"]
    for i in range(nodes):
        lines += [f"  node_{i}:", f"    call: bench.handlers:step_{i % 17}"]
        if i:
            needs = sorted(rng.sample(range(i), min(i, fan_in)))
            lines.append("    needs: [" + ", ".join(f"node_{j}" for j in needs) + "]")
            lines.append("    input:")
            lines += [f'      from_{j}: "${{{{ nodes.node_{j}.output.value }}}}"' for j in needs]
            lines.append('      order: "${{ run.input.order.id }}"')
        lines.append("    timeout: 30s")
        lines.append("    retry: {max_attempts: 3, backoff: {initial: 1s, max: 1m}}")
    return "\n".join(lines) + "\n"


def wide_mapping(keys: int = 50_000) -> str:
    """A one-node flow whose ``input`` is a mapping of ``keys`` keys. Lints clean."""
    lines = ["name: wide", "nodes:", "  a:", "    call: bench.handlers:step", "    input:"]
    lines += [f"      k{i:05d}: v{i:05d}" for i in range(keys)]
    return "\n".join(lines) + "\n"


def list_flow(items: int, width: int = 1, flow_style: bool = False) -> str:
    """A one-node flow whose ``input`` lists ``items`` numbers of ``width`` digits (the
    index modulo 10**width; a block list, or a flow list ``[0, 1, ...]``)."""
    head = "name: long\nnodes:\n  a:\n    call: bench.handlers:step\n    input:"
    numbers = [f"{i % 10**width:0{width}d}" for i in range(items)]
    if flow_style:
        return head + " [" + ", ".join(numbers) + "]\n"
    return head + "\n" + "".join(f"      - {n}\n" for n in numbers)


def cut_off(size: int = 2 * MIB) -> str:
    """A dense flow cut to ``size`` bytes inside the last quoted string it starts."""
    text = dense_flow(nodes=4000)
    cut = text.rfind(': "', 0, size - 10) + 8
    return text[:cut]


def broken_last_line() -> str:
    """The ``dense`` flow whose last line (a ``retry`` mapping) is not closed."""
    text = dense_flow()
    assert text.endswith("}}\n")
    return text[:-3] + "\n"


def padded(text: str, size: int) -> str:
    """``text`` followed by comment lines, ``size`` bytes in all (UTF-8)."""
    missing = size - len(text.encode())
    if missing < 0:
        raise ValueError(f"text is {-missing} bytes larger than {size}")
    full, rest = divmod(missing, 80)
    return text + ("#" * 79 + "\n") * full + ("#" * (rest - 1) + "\n" if rest else "")


def cases() -> list[tuple[str, Callable[[Path], list[Path]], str]]:
    """``(name, write files into a folder -> paths to lint, what lint must find)``."""

    def one(name: str, text: Callable[[], str]) -> Callable[[Path], list[Path]]:
        def write(folder: Path) -> list[Path]:
            path = folder / f"{name}.yaml"
            path.write_text(text(), encoding="utf-8")
            return [path]

        return write

    def examples(_folder: Path) -> list[Path]:
        return [REPO / "examples" / "flows"]

    unclosed = "bad: [\n"
    return [
        ("dense", one("dense", dense_flow), "no problems"),
        ("wide", one("wide", wide_mapping), "no problems"),
        ("10 MiB", one("ten", lambda: padded(wide_mapping(400_000), 10 * MIB)), "E000"),
        (
            "value cap",
            one("cap", lambda: padded(list_flow(400_000, flow_style=True), 2 * MIB)),
            "E001",
        ),
        (
            "truncated",
            one(
                "truncated",
                lambda: padded(list_flow(120_000, width=8), 2 * MIB - len(unclosed)) + unclosed,
            ),
            "E001",
        ),
        ("cut off", one("cut", cut_off), "E001"),
        ("broken last", one("broken", broken_last_line), "E001"),
        ("examples", examples, "no problems"),
    ]


def measure(paths: list[Path], repeat: int) -> dict[str, Any]:
    """Lint ``paths`` ``repeat`` times: problems of the last run, wall and CPU seconds."""
    walls: list[float] = []
    cpus: list[float] = []
    found: list[str] = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        problems = lint_paths([str(p) for p in paths])
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        found = [f"{p.code} {p.line}:{p.col} {p.message}" for p in problems]
    best = min(range(repeat), key=walls.__getitem__)
    return {
        "problems": found,
        "wall_min_s": round(walls[best], 3),
        "wall_median_s": round(statistics.median(walls), 3),
        "cpu_s": round(cpus[best], 3),
    }


def measure_cli(paths: list[Path], repeat: int) -> float:
    """Fastest wall seconds of ``cyclone-flow lint PATHS`` as a subprocess."""
    exe = shutil.which("cyclone-flow", path=str(Path(sys.executable).parent)) or "cyclone-flow"
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([exe, "lint", *map(str, paths)], capture_output=True, check=False)
        best = min(best, time.perf_counter() - t0)
    return round(best, 3)


def run(repeat: int = 5, cli: bool = False, only: list[str] | None = None) -> dict[str, Any]:
    """Every case's figures (see the module docstring), the machine load and the target;
    ``only``: the names of the cases to run (default: all)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cyclone-lint-bench-") as tmp:
        for name, write, expect in cases():
            if only and name not in only:
                continue
            folder = Path(tmp) / name.replace(" ", "_")
            folder.mkdir()
            paths = write(folder)
            size = sum(p.stat().st_size for p in paths if p.is_file())
            figures = measure(paths, repeat)
            figures["bytes"] = size
            figures["expected"] = expect
            if cli:
                figures["cli_min_s"] = measure_cli(paths, repeat)
            results[name] = figures
    met = {n: results[n]["wall_min_s"] < TARGET_S for n in ("dense", "wide") if n in results}
    return {
        "yaml_parser": getattr(read, "YAML_PARSER", "ruamel"),  # (older builds: ruamel)
        "max_file_bytes": read.MAX_FILE_BYTES,
        "max_values": read.MAX_VALUES,
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "repeat": repeat,
        "cases": results,
        "target": f"dense and wide under {TARGET_S:g} s (fastest run)",
        "target_met": met,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lint", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    parser.add_argument("--cli", action="store_true", help="also time the CLI subprocess")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="run only these cases")
    args = parser.parse_args(argv)
    doc = run(repeat=args.repeat, cli=args.cli, only=args.only)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    cli = " cli min s" if args.cli else ""
    print(f"{'case':<11} {'bytes':>10} {'min s':>7} {'median s':>8} {'cpu s':>7}{cli}  problems")
    for name, r in doc["cases"].items():
        first = r["problems"][0] if r["problems"] else "none"
        more = f" (+{len(r['problems']) - 1})" if len(r["problems"]) > 1 else ""
        shown = f" {r['cli_min_s']:>9.2f}" if args.cli else ""
        print(
            f"{name:<11} {r['bytes']:>10,} {r['wall_min_s']:>7.2f} {r['wall_median_s']:>8.2f} "
            f"{r['cpu_s']:>7.2f}{shown}  {first[:70]}{more}"
        )
    met = ", ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in doc["target_met"].items())
    print(
        f"parser {doc['yaml_parser']}; {doc['cpus']} CPUs, 1-min load {doc['load_avg_1m']}; "
        f"{doc['repeat']} runs per case; target {doc['target']}: {met}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
