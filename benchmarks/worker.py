"""The worker process a benchmark times: ``python -m benchmarks.worker SPEC_JSON``.

It starts ``Client(url, schema=..., workers=N, allow_modules=["benchmarks.handlers"])``,
polls every 100 ms until no run of the schema is running, shuts the client down and prints
one JSON line: wall seconds, CPU seconds, peak RSS (KiB), RSS samples, polls, failed runs.
Running the worker in its own process makes its peak RSS and CPU time its own.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import HANDLER_MODULE
from benchmarks.sql import qualified
from cyclone_flow import Client


def rss_bytes() -> int:
    """This process's resident set size now, in bytes (Linux /proc)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()


def main(argv: list[str]) -> int:
    spec: dict[str, Any] = json.loads(argv[0])
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # the engine's logger defaults to INFO (one line per finished run): a benchmark
    # measures the engine, not a stderr write per run
    logging.getLogger("cyclone_flow").setLevel(logging.WARNING)
    q = qualified(spec["schema"])
    options: dict[str, Any] = {
        "schema": spec["schema"],
        "workers": spec["workers"],
        "allow_modules": [HANDLER_MODULE],
    }
    options.update(spec.get("options") or {})
    if "poll_interval" in options:
        options["poll_interval"] = tuple(options["poll_interval"])
    deadline = time.monotonic() + float(spec["timeout_s"])
    rss_every = float(spec.get("rss_every_s") or 0.0)
    samples: list[tuple[float, int, int]] = []
    polls = 0
    client = Client(spec["url"], **options)
    with psycopg.connect(spec["url"], autocommit=True) as watch:
        started = time.perf_counter()
        cpu0 = time.process_time()
        client.start()
        next_sample = 0.0
        left, failed = -1, 0
        while True:
            row = watch.execute(q["bench_runs_left"]).fetchone()
            polls += 1
            assert row is not None
            left, failed = int(row[0]), int(row[1])
            elapsed = time.perf_counter() - started
            if rss_every and elapsed >= next_sample:
                samples.append((round(elapsed, 3), left, rss_bytes()))
                next_sample = elapsed + rss_every
            if left == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        samples.append((round(wall, 3), left, rss_bytes()))
    client.shutdown(timeout=5)
    if left:
        print(f"timed out with {left} runs still running", file=sys.stderr)
        return 3
    report = {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "rss_samples": samples,
        "polls": polls,
        "runs_failed": failed,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
