"""The benchmark suite still runs: ``python -m benchmarks --quick`` (tiny sizes, one
worker count) against the test database, every benchmark, JSON output. Figures are not
checked (benchmarks are read, not asserted); only that each benchmark produced one."""

from __future__ import annotations

import json

import pytest

from benchmarks.__main__ import main


def test_quick_suite_runs_every_benchmark(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["--quick", "--json", "--database-url", database_url, "--soak", "--soak-steps", "50"]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {r["name"]: r for r in doc["results"]}
    ceilings = [r for r in doc["results"] if r["name"].startswith("ceiling ")]
    assert {r["name"] for r in ceilings} == {
        "ceiling 1/tx", "ceiling 1/tx idx", "ceiling 1/tx full idx",
        "ceiling batch50", "ceiling batch50 idx", "ceiling batch50 full idx",
    }  # fmt: skip
    assert all(r["value"] > 0 and r["workers"] == 2 for r in ceilings)
    for name in ("no-op steps", "3-node chain", "exactly-once steps"):
        result = by_name[name]
        assert result["value"] > 0, result
        assert result["peak_rss_mib"] > 0
        assert set(result["ratios"]) == {"1/tx", "batch50", "1/tx idx", "batch50 idx"}
        assert result["extra"]["commits_per_step"] > 0
    assert by_name["no-op async steps"]["value"] > 0  # an async def handler
    assert by_name["3-node chain"]["extra"]["steps"] == 3 * by_name["3-node chain"]["extra"]["runs"]
    fan = by_name["fan-out 100 items"]
    assert fan["value"] > 0 and fan["extra"]["items_per_s"] > 0
    soak = by_name["soak 50 no-op steps"]
    assert soak["extra"]["rss_end_mib"] > 0 and soak["extra"]["steps"] == 50
    latency = by_name["enqueue-to-claim latency"]
    assert latency["value"] > 0 and "p95=" in latency["note"], latency
    for name in ("bulk enqueue", "bulk submit 3-node"):
        assert by_name[name]["value"] > 0 and by_name[name]["extra"]["ceiling_ratio"] > 0
    assert sum(r["name"].startswith("bulk ceiling ") for r in doc["results"]) == 4
    assert by_name["enqueue call"]["value"] > 0 and by_name["enqueue call"]["extra"]["p95_ms"]
    assert {t["target"] for t in doc["targets"]} >= {
        "3-node chain >= 1,000 runs/s",
        "enqueue-to-claim p50 < 2 ms",
        "bulk enqueue >= 25,000 jobs/s",
        "one enqueue call p50 <= 1.5 ms",
    }
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["postgres"].startswith("PostgreSQL")


def test_noop_with_two_worker_processes(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["--quick", "--json", "--database-url", database_url, "--only", "noop",
         "--processes", "2"]
    )  # fmt: skip
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    (result,) = doc["results"]
    assert result["name"] == "no-op, 2 processes"
    assert result["value"] > 0 and result["extra"]["processes"] == 2
    assert result["extra"]["steps"] == result["extra"]["runs"]
    (target,) = doc["targets"]
    assert target["target"] == "no-op steps with 2 processes >= 5,500 steps/s"


def test_processes_below_1_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--only", "noop", "--processes", "0"])
    assert exc.value.code == 2
    assert "--processes: each count must be a whole number >= 1" in capsys.readouterr().err


@pytest.mark.jit_pg  # also on Debian's server with JIT on: a JIT-compiled claim took seconds
def test_limits_benchmark_gives_the_four_figures_and_their_ratios(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--quick", "--json", "--database-url", database_url, "--only", "limits"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in doc["results"]]
    assert names == [
        "no-op, no limit",
        "no-op, global limit 40",
        "no-op, 1,000 keys at limit 1",
        "no-op, rate limit above the rate",
    ]
    assert all(r["value"] > 0 for r in doc["results"])
    assert all(r["extra"]["vs_unlimited"] > 0 for r in doc["results"][1:])
    assert {t["target"] for t in doc["targets"]} == {
        "no-op, global limit 40 costs at most 25%",
        "no-op, 1,000 keys at limit 1 costs at most 15%",
        "no-op, rate limit above the rate costs at most 15%",
    }
