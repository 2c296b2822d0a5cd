"""Chaos: hundreds of runs of a diamond flow whose every step writes one
row into ``chaos_ledger`` (``UNIQUE (run_id, node)``, plain ``INSERT``) through
``ctx.completion_tx()``, executed by several real worker processes while

- each worker process SIGKILLs itself at random at the named points (before the handler,
  inside it with the completion transaction open, after the business write and before
  the commit, right after the commit; see :mod:`cyclone_test_handlers.chaos`), and
- a driver thread SIGKILLs random worker processes at random moments,

and both kinds of dead processes are replaced at once. Half the fleet are real
``cyclone-flow worker`` processes, half ``python -m cyclone_test_handlers.chaos``
processes (which take the ``after_commit`` hook). At the end every run completed, every
(run, node) has exactly one ledger row (a duplicate effect would have failed its attempt
on the unique key, and so its run), no step is left running or retried, the sweep
recorded reclaims, and each named kill point fired (Engine Design: Leases and
Heartbeats, ctx.CompletionTx()).

The default run is the CI version (200 runs, under a minute on two cores); ``--soak``
adds a 2,000-run variant.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cyclone_test_handlers import chaos
from helpers.procs import ModuleWorkerProcess, WorkerProcess

from cyclone_flow.flowfile import load_flow_text

DIAMOND = """
name: chaos_diamond
nodes:
  a: {call: "cyclone_test_handlers.chaos:step"}
  b: {call: "cyclone_test_handlers.chaos:step", needs: [a]}
  c: {call: "cyclone_test_handlers.chaos:step", needs: [a]}
  d: {call: "cyclone_test_handlers.chaos:step", needs: [b, c]}
"""
NODES = ("a", "b", "c", "d")
LEASE_TTL_S = 1.0


@dataclass(frozen=True)
class Plan:
    """One chaos run: ``runs`` runs on ``processes`` worker processes of 2 workers each;
    ``kill_p`` is each named point's self-kill probability; the driver kills a random
    process every ``kill_every`` (min, max) seconds. The chaos lasts until every run ended
    or ``chaos_for`` seconds passed, and in any case until every named kill point fired at
    least once (a loaded machine makes few completions in ``chaos_for``), but no longer
    than ``points_within`` seconds (then the test fails naming the points that never
    fired); then the kills stop and the runs left finish, as long as some step completes
    in every ``settle_for`` seconds."""

    runs: int
    processes: int
    kill_p: float
    kill_every: tuple[float, float]
    chaos_for: float
    settle_for: float
    points_within: float = 180.0


class Fleet(threading.Thread):
    """The driver thread: keeps ``processes`` workers alive, replaces every dead one at
    once, and SIGKILLs a random one at random moments until told to calm down."""

    def __init__(self, database_url: str, schema: str, tmp_path: Path, plan: Plan) -> None:
        super().__init__(name="chaos-driver", daemon=True)
        self.database_url = database_url
        self.schema = schema
        self.tmp_path = tmp_path
        self.plan = plan
        self.kill_log = tmp_path / "kills.log"
        self.calm_file = tmp_path / "calm"
        self.rng = random.Random()
        self.procs: list[WorkerProcess] = []
        self.spawned = 0
        self.driver_kills = 0
        self.self_kills = 0
        self._calm = threading.Event()
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def spawn(self) -> WorkerProcess:
        env = {
            "CHAOS_KILL_P": str(self.plan.kill_p),
            "CHAOS_KILL_LOG": str(self.kill_log),
            "CHAOS_CALM_FILE": str(self.calm_file),
        }
        self.spawned += 1
        log = self.tmp_path / f"worker-{self.spawned}.log"
        if self.spawned % 2:
            env.update(
                CHAOS_DATABASE_URL=self.database_url,
                CHAOS_SCHEMA=self.schema,
                CHAOS_LEASE_TTL=str(LEASE_TTL_S),
            )
            return ModuleWorkerProcess("cyclone_test_handlers.chaos", log, env=env)
        return WorkerProcess(
            self.database_url, self.schema, log, workers=2, lease_ttl=f"{LEASE_TTL_S}s", env=env
        )

    def run(self) -> None:
        try:
            self._drive()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _drive(self) -> None:
        with self._lock:
            self.procs = [self.spawn() for _ in range(self.plan.processes)]
        next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5)  # the first one early
        while not self._halt.is_set():
            with self._lock:
                for i, proc in enumerate(self.procs):
                    if not proc.alive():  # it killed itself at a named point
                        proc.wait()
                        self.self_kills += 1
                        self.procs[i] = self.spawn()
                if not self._calm.is_set() and time.monotonic() >= next_kill:
                    i = self.rng.randrange(len(self.procs))
                    self.procs[i].kill()
                    self.driver_kills += 1
                    self.procs[i] = self.spawn()
                    next_kill = time.monotonic() + self.rng.uniform(*self.plan.kill_every)
            self._halt.wait(0.02)

    def calm(self) -> None:
        """End the chaos: no more driver kills, and no named point fires any more."""
        self._calm.set()
        self.calm_file.touch()

    def stop(self) -> None:
        """Stop driving and SIGKILL every worker process still alive."""
        self._halt.set()
        self.join(30)
        with self._lock:
            for proc in self.procs:
                proc.kill()

    def fired_points(self) -> Counter[str]:
        if not self.kill_log.exists():
            return Counter()
        lines = self.kill_log.read_text(encoding="utf-8").splitlines()
        return Counter(line.split(" ", 1)[0] for line in lines)


def drive(fleet: Fleet, plan: Plan, db: Any, started: float, points: Sequence[str]) -> float | None:
    """Start ``fleet`` and let the chaos run until every run ended or ``plan.chaos_for``
    passed, and until each of ``points`` (the named kill points) fired at least once; then
    calm it (no more kills) and wait for the rest (:func:`_settle`); stop it.
    Returns the seconds from ``started`` to the calm (None: no calm needed). Raises when
    the fleet's driver thread failed, or (after stopping the fleet) when a point had not
    fired after ``plan.points_within`` seconds or when every run ended before it fired."""

    def unfinished() -> int:
        row = db.execute("SELECT count(*) FROM cyclone_runs WHERE state = 'running'").fetchone()
        return int(row[0])

    def missing() -> list[str]:
        fired = fleet.fired_points()
        return [point for point in points if point not in fired]

    fleet.start()
    chaos_start = time.monotonic()
    calm_after = None
    try:
        chaos_deadline = chaos_start + plan.chaos_for
        points_deadline = chaos_start + max(plan.points_within, plan.chaos_for)
        # polling the database (and the kill log) for the end of the chaos
        while unfinished() and fleet.is_alive():
            now = time.monotonic()
            if now >= points_deadline or (now >= chaos_deadline and not missing()):
                break
            time.sleep(0.1)
        chaos_s = time.monotonic() - chaos_start
        never_fired = missing()  # read before the calm: no point fires after it
        if unfinished():
            calm_after = time.monotonic() - started
            fleet.calm()
            _settle(fleet, db, unfinished, plan.settle_for)
    finally:
        fleet.stop()
    assert fleet.error is None, fleet.error
    assert never_fired == [], (
        f"kill points that never fired: {never_fired}, in {chaos_s:.0f}s of chaos (limit"
        f" {plan.points_within:.0f}s; {unfinished()} runs unfinished); fired:"
        f" {dict(fleet.fired_points())}"
    )
    return calm_after


def _settle(fleet: Fleet, db: Any, unfinished: Callable[[], int], settle_for: float) -> None:
    """Wait until no run is unfinished (or the fleet's thread died), as long as steps keep
    completing: fails when ``settle_for`` seconds pass in which none did (a stuck run), not
    at a fixed deadline that a loaded machine misses (runs advance breadth-first: the
    first may end only near the last)."""

    def completed() -> int:
        row = db.execute("SELECT count(*) FROM cyclone_steps WHERE state = 'completed'").fetchone()
        return int(row[0])

    done = completed()
    progress_at = time.monotonic()
    while unfinished() and fleet.is_alive():
        time.sleep(0.1)  # polling the database for completed steps
        now_done = completed()
        if now_done > done:
            done, progress_at = now_done, time.monotonic()
        elif time.monotonic() - progress_at >= settle_for:
            raise AssertionError(
                f"no step completed in {settle_for:.0f}s once the chaos stopped:"
                f" {unfinished()} runs unfinished"
            )


def _run_chaos(
    make_client: Any, db: Any, schema: str, database_url: str, tmp_path: Path, plan: Plan
) -> None:
    started = time.monotonic()
    db.execute(chaos.LEDGER_DDL)
    submitter = make_client()
    flow = load_flow_text(DIAMOND)
    run_ids = {submitter.submit(flow, {"schema": schema}) for _ in range(plan.runs)}

    fleet = Fleet(database_url, schema, tmp_path, plan)
    calm_after = drive(fleet, plan, db, started, chaos.POINTS)
    elapsed = time.monotonic() - started

    states = dict(db.execute("SELECT state, count(*) FROM cyclone_runs GROUP BY state"))
    bad = db.execute(
        "SELECT run_id, node, state, attempt, error_kind, error FROM cyclone_steps"
        " WHERE state <> 'completed' OR attempt <> 1 LIMIT 5"
    ).fetchall()
    assert states == {"completed": plan.runs}, (states, bad)
    assert bad == []  # nothing running, nothing retried: a kill is not a failed attempt
    per_step = db.execute(
        """SELECT s.run_id::text, s.node, count(l.node)
           FROM cyclone_steps s
           LEFT JOIN chaos_ledger l ON l.run_id = s.run_id AND l.node = s.node
           GROUP BY s.run_id, s.node"""
    ).fetchall()
    assert {r[0] for r in per_step} == run_ids
    assert len(per_step) == plan.runs * len(NODES)
    assert [r for r in per_step if r[2] != 1] == []  # exactly one effect per step
    total = db.execute("SELECT count(*) FROM chaos_ledger").fetchone()[0]
    assert total == plan.runs * len(NODES)
    reclaims, reclaimed_steps = db.execute(
        "SELECT coalesce(sum(reclaims), 0), count(*) FILTER (WHERE reclaims > 0) FROM cyclone_steps"
    ).fetchone()
    fired = fleet.fired_points()
    print(
        f"\nchaos: {plan.runs} runs in {elapsed:.1f}s"
        f"{f' (calmed after {calm_after:.1f}s)' if calm_after else ''}; "
        f"{fleet.spawned} processes started, {fleet.driver_kills} killed by the driver, "
        f"{fleet.self_kills} killed themselves {dict(fired)}; "
        f"{reclaims} reclaims on {reclaimed_steps} steps"
    )
    assert set(fired) == set(chaos.POINTS), f"kill points that never fired: {fired}"
    assert fleet.driver_kills >= 2, f"only {fleet.driver_kills} driver kills"
    assert reclaims > 0 and reclaimed_steps > 0


@pytest.mark.timeout(900)  # the chaos waits for every kill point (Plan)
def test_sigkill_chaos_exactly_one_ledger_row_per_step(
    make_client: Any, db: Any, schema: str, database_url: str, tmp_path: Path
) -> None:
    _run_chaos(
        make_client,
        db,
        schema,
        database_url,
        tmp_path,
        Plan(
            runs=200,
            processes=3,
            kill_p=0.003,
            kill_every=(1.0, 3.0),
            chaos_for=20.0,
            settle_for=30.0,
        ),
    )


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_sigkill_chaos_soak(
    make_client: Any, db: Any, schema: str, database_url: str, tmp_path: Path
) -> None:
    _run_chaos(
        make_client,
        db,
        schema,
        database_url,
        tmp_path,
        Plan(
            runs=2000,
            processes=4,
            kill_p=0.003,
            kill_every=(1.0, 3.0),
            chaos_for=900.0,
            settle_for=120.0,
        ),
    )
