"""Chaos of the group-commit completer: many runs of a diamond + fan-out + join
flow (:data:`cyclone_test_handlers.group_commit.FLOW`) whose handlers never open
``ctx.completion_tx()``, so every completion goes through a completer batch, executed by
several real worker processes of 4 workers each while

- each process SIGKILLs itself at random at the named points of group commit (the handler
  returned; the completion queued in the completer; inside the batch transaction with
  every statement run; right after a batch committed, before its other steps settled;
  see :mod:`cyclone_test_handlers.group_commit`), and
- the driver SIGKILLs random processes at random moments,

and dead processes are replaced at once. At the end every run completed with the right
output (each downstream step saw its upstream outputs), every step is ``completed`` with
one output and went to ``completed`` exactly once (a trigger counts the transitions),
nothing is left running or leased, the handler ran at least once per step and at most once
more than the step was reclaimed, and some steps ran again after a crash (at-least-once).
Engine Design: Leases and Heartbeats, CAS State Transitions.

The default run takes about 30 s; ``--soak`` adds a longer variant.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers import group_commit as gc
from helpers.procs import ModuleWorkerProcess, WorkerProcess
from test_chaos_workers import Fleet, Plan, drive

from cyclone_flow.flowfile import load_flow_text

LEASE_TTL_S = 1.0


class GroupCommitFleet(Fleet):
    """The chaos driver of test_chaos_workers with group-commit worker processes."""

    def spawn(self) -> WorkerProcess:
        self.spawned += 1
        env = {
            "CHAOS_KILL_P": str(self.plan.kill_p),
            # each point kills at its first reach (then with kill_p): every point fires
            # however few completions a loaded machine makes in the chaos window
            "CHAOS_FIRST_P": "1.0",
            "CHAOS_KILL_LOG": str(self.kill_log),
            "CHAOS_CALM_FILE": str(self.calm_file),
            "GC_DATABASE_URL": self.database_url,
            "GC_SCHEMA": self.schema,
            "GC_LEASE_TTL": str(LEASE_TTL_S),
        }
        log = self.tmp_path / f"worker-{self.spawned}.log"
        return ModuleWorkerProcess("cyclone_test_handlers.group_commit", log, env=env)


def _run_chaos(
    db: Any, make_client: Any, database_url: str, schema: str, tmp_path: Path, plan: Plan
) -> None:
    started = time.monotonic()
    db.execute(gc.CALLS_DDL)
    submitter = make_client()
    flow = load_flow_text(gc.FLOW)
    rng = random.Random()
    inputs = {submitter.submit(flow, {"n": n}): n for n in rng.sample(range(10_000), plan.runs)}

    fleet = GroupCommitFleet(database_url, schema, tmp_path, plan)
    calm_after = drive(fleet, plan, db, started, gc.POINTS)
    elapsed = time.monotonic() - started

    # every run completed, with the output its input determines
    states = dict(db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state"))
    assert states == {"completed": plan.runs}, states
    outputs = dict(db.execute("SELECT id::text, output FROM cyclone_runs").fetchall())
    wrong = [
        (rid, out) for rid, out in outputs.items() if out != {"e": gc.expected(inputs[rid])["e"]}
    ]
    assert wrong == [], wrong[:3]
    # every step completed with its output; nothing left running or leased; no attempt
    # failed (a crash is not a failed attempt)
    bad = db.execute(
        "SELECT run_id, node, state, attempt, lease_owner, error FROM cyclone_steps"
        " WHERE state <> 'completed' OR attempt <> 1 OR output IS NULL"
        "    OR lease_expiry IS NOT NULL LIMIT 5"
    ).fetchall()
    assert bad == []
    assert db.execute("SELECT count(*) FROM cyclone_steps").fetchone()[0] == (
        plan.runs * gc.STEPS_PER_RUN
    )
    node_outputs = db.execute(
        "SELECT run_id::text, node, output FROM cyclone_steps WHERE parent_node IS NULL"
    ).fetchall()
    wrong = [
        (rid, node, out) for rid, node, out in node_outputs if out != gc.expected(inputs[rid])[node]
    ]
    assert wrong == [], wrong[:3]
    # each step went to 'completed' exactly once
    twice = db.execute(
        "SELECT step_id, count(*) FROM gc_completions GROUP BY step_id HAVING count(*) <> 1"
    ).fetchall()
    assert twice == []
    assert db.execute("SELECT count(DISTINCT step_id) FROM gc_completions").fetchone()[0] == (
        plan.runs * gc.STEPS_PER_RUN
    )
    # at-least-once: every handler-run step was called, at most once more than reclaimed
    calls = db.execute(
        """SELECT s.id, s.reclaims, count(c.id)
           FROM cyclone_steps s LEFT JOIN gc_calls c ON c.step_id = s.id
           WHERE s.type IN ('action', 'fan_out_item')
           GROUP BY s.id, s.reclaims"""
    ).fetchall()
    assert len(calls) == plan.runs * (gc.STEPS_PER_RUN - 1)
    assert [r for r in calls if not 1 <= r[2] <= r[1] + 1] == []
    again = sum(1 for r in calls if r[2] > 1)
    reclaims = sum(r[1] for r in calls)
    fired = fleet.fired_points()
    print(
        f"\ngroup-commit chaos: {plan.runs} runs in {elapsed:.1f}s"
        f"{f' (calmed after {calm_after:.1f}s)' if calm_after else ''}; "
        f"{fleet.spawned} processes, {fleet.driver_kills} driver kills, "
        f"{fleet.self_kills} self kills {dict(fired)}; {reclaims} reclaims; "
        f"{again} steps ran more than once; {json.dumps(states)}"
    )
    assert set(fired) == set(gc.POINTS), f"kill points that never fired: {fired}"
    assert fleet.driver_kills >= 2, f"only {fleet.driver_kills} driver kills"
    assert again > 0, "no completion was lost to a crash: the chaos proved nothing"


@pytest.mark.timeout(900)  # the chaos waits for every kill point (Plan)
def test_sigkill_during_group_commit(
    make_client: Any, db: Any, schema: str, database_url: str, tmp_path: Path
) -> None:
    _run_chaos(
        db,
        make_client,
        database_url,
        schema,
        tmp_path,
        Plan(
            runs=500,
            processes=3,
            kill_p=0.002,
            kill_every=(1.0, 3.0),
            chaos_for=18.0,
            settle_for=30.0,
        ),
    )


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_sigkill_during_group_commit_soak(
    make_client: Any, db: Any, schema: str, database_url: str, tmp_path: Path
) -> None:
    _run_chaos(
        db,
        make_client,
        database_url,
        schema,
        tmp_path,
        Plan(
            runs=2000,
            processes=4,
            kill_p=0.002,
            kill_every=(1.0, 3.0),
            chaos_for=900.0,
            settle_for=120.0,
        ),
    )
