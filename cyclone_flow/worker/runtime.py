"""A started client's threads: worker threads that run handlers, one claim loop, one
heartbeat (:class:`cyclone_flow.worker.heartbeat.Heartbeat`) that renews every lease of
this client each ``lease_ttl / 3``, the completer thread of the group commit, and one
maintenance loop (:class:`cyclone_flow.maintenance.loop.MaintenanceLoop`: recovery sweep,
schedule scanner, sequence safety net, retention sweep, wait scanner, deadline scanner,
worker reaper, each from :mod:`cyclone_flow.maintenance`). The heartbeat also keeps this
client's ``cyclone_workers`` row, written before the threads start and deleted at the end
of a clean shutdown. The client's LISTEN connection
(:class:`cyclone_flow.notify.Listener`) forwards wakeups through
:meth:`Worker.notice_available`.

Claiming follows Engine Design: The Claiming Algorithm; the claim loop polls within
``poll_interval = (min, max)`` and wakes at once on a ``cyclone_available`` notification
for a queue it serves (Engine Design: LISTEN/NOTIFY and the Polling Floor).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from cyclone_flow.config import ClientConfig
from cyclone_flow.db import session
from cyclone_flow.db.conn import Conn, Database, Session, retry_conflicts
from cyclone_flow.db.errors import (
    BRIEF_POOL_WAIT_S,
    database_lost,
    prepared_statement_lost,
    wait_bound_passed,
)
from cyclone_flow.db.rows import ClaimedStep, LimitedClaim
from cyclone_flow.engine import claim
from cyclone_flow.events import StepEvent
from cyclone_flow.maintenance import services
from cyclone_flow.maintenance.loop import MaintenanceLoop
from cyclone_flow.maintenance.scheduler import ScheduleScanner
from cyclone_flow.notify import Publish
from cyclone_flow.states import EventKind
from cyclone_flow.worker.execute import Executor
from cyclone_flow.worker.heartbeat import Heartbeat, HeldLease, WorkerIdentity

_RATE_RETRY_FLOOR_S = 0.005
"""The shortest wait before claiming again for a rate token (a token due now, or already
back: the claim loop never spins on the database clock's edge)."""


def shutdown_write_bound(timeout: float) -> float:
    """Seconds each statement of a worker's shutdown may wait for a lock or run (and wait
    for a pool connection), for a shutdown timeout of ``timeout`` seconds: the timeout,
    within [0.5, 2] s. Past it the write is left undone (docs/deployment.md: Graceful
    shutdown)."""
    return min(max(timeout, 0.5), 2.0)


class _Stopped(Exception):
    """Internal: the shutdown began before a claim statement was sent (none is)."""


@dataclass
class _LimitedQueue:
    """The limited claim of one served queue (docs/flow-control.md): ``active`` while the
    queue has limited steps (the claim loop then runs the limited claim on every round),
    else whether it has some is checked again at ``next_try`` (monotonic seconds: every
    poll_interval max, so a queue without limited steps costs one index probe per second,
    not a statement per claim); ``cursor``: the key the next limited claim starts after
    (round robin)."""

    active: bool = False
    next_try: float = 0.0
    cursor: str = ""


class Worker:
    """The background machinery of :meth:`cyclone_flow.Client.start`.

    ``scheduler``: the client's schedule scanner, run by the maintenance loop after the
    recovery sweep. Counters for observability and tests (read them, never write them):
    ``claim_queries`` (claim statements run), ``wakeups_forwarded`` (``cyclone_available``
    notifications for a served queue, each waking the claim loop) and ``wakeups_ignored``
    (notifications for queues this worker does not serve: no claim follows them).
    """

    def __init__(
        self,
        db: Database,
        config: ClientConfig,
        executor: Executor,
        publish: Publish,
        only_run: str | None = None,
        scheduler: ScheduleScanner | None = None,
    ) -> None:
        self.db = db
        self.config = config
        self.executor = executor
        self.publish = publish
        self.only_run = only_run
        self.served = frozenset(config.worker_queues)
        self.claim_queries = 0
        self.wakeups_forwarded = 0
        self.wakeups_ignored = 0
        self.log = config.logger
        self.reporter = executor.reporter
        self._stop = threading.Event()  # stops claiming and the sweep
        self._stop_heartbeat = threading.Event()  # later: leases live until released
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._busy: dict[str, int] = dict.fromkeys(config.worker_queues, 0)
        # (step id, lease_generation) -> cancel event of the handler holding that lease.
        # Keyed by the generation too: the same step can come back to this client under
        # a new lease while an older handler of it is still running.
        self._leases: dict[tuple[int, int], threading.Event] = {}
        # leases of steps whose handler returned and whose completion waits for the
        # completer's group commit (a renewal that fails for them means committed, not lost)
        self._handed: set[tuple[int, int]] = set()
        # per served queue: the limited claim's state (docs/flow-control.md)
        self._limited = {q: _LimitedQueue() for q in config.worker_queues}
        # monotonic instant a rate key of a served queue gets a claim back, after a
        # limited claim that took nothing (the claim loop claims again then: nothing else
        # wakes it for a token); None: no such key
        self._rate_due: float | None = None
        self._tasks: queue.Queue[ClaimedStep | None] = queue.Queue()
        self._idle = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        # the connection of the claim statement in flight (None between claims), which a
        # shutdown cancels; set and cleared under _claim_guard, which the cancel holds
        self._claim_guard = threading.Lock()
        self._claim_conn: Conn | None = None
        # seconds each statement of the shutdown may wait (set when it begins)
        self._write_bound = shutdown_write_bound(BRIEF_POOL_WAIT_S)
        self.heartbeat = Heartbeat(
            db,
            config.client_id,
            config.lease_ttl,
            self._lock,
            self._leases,
            self._handed,
            self.log,
            WorkerIdentity(dict(config.worker_queues), only_run),
            self.reporter,
        )
        # the maintenance services (Engine Design: Pool Budget lists them), run in order by
        # the maintenance loop, each every sweep_interval (retention: its own)
        found = services(db, config, publish, self.log, self.reporter, scheduler)
        self.rescuer, self.scheduler = found.rescuer, found.scheduler
        self.sequences, self.retention = found.sequences, found.retention
        self.wait_scanner, self.deadline_scanner = found.wait_scanner, found.deadline_scanner
        self.worker_reaper, self.owner_release = found.worker_reaper, found.owner_release
        self.rate_window_pruner = found.rate_window_pruner
        self.maintenance = MaintenanceLoop(
            found.in_order(), config.sweep_interval, self.log, self.reporter
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Write this client's ``cyclone_workers`` row, then start every thread; returns
        at once."""
        self.heartbeat.register()
        self.executor.step_logs.start()  # handlers' prints and records go to their steps
        targets: list[tuple[str, Callable[[], None]]] = [
            ("claim", self._claim_loop),
            ("heartbeat", self._heartbeat_loop),
            ("maintenance", self._maintenance_loop),
        ]
        self.executor.start()
        for i in range(self.config.workers):
            targets.append((f"worker-{i}", self._work_loop))
        for name, target in targets:
            thread = threading.Thread(target=target, name=f"cyclone-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def in_flight(self) -> int:
        """How many steps this client holds a lease on now: executing, or done and waiting
        for the completer's group commit."""
        with self._lock:
            return len(self._leases)

    def shutdown(self, timeout: float) -> None:
        """Stop claiming, let in-flight handlers finish for up to ``timeout`` seconds, then
        tell the rest to stop and release their leases so another worker can claim them
        at once (not after the TTL). A claim in flight is cancelled; the steps a claim
        still returns are released by the claim loop (:meth:`_claim_once`) before this
        returns.

        Bounded whatever the database does (e.g. another session holds ``LOCK TABLE`` on
        the steps): every statement the shutdown sends waits at most
        :func:`shutdown_write_bound` ``(timeout)`` seconds for a lock or to run, the
        handlers are told by then, and what could not be written is left undone (the
        leases lapse and the recovery sweep reclaims the steps, as after a crash)."""
        bound = self._write_bound = shutdown_write_bound(timeout)
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + max(0.0, timeout)
        self._end_claims()
        with self._idle:
            while sum(self._busy.values()) and time.monotonic() < deadline:
                self._idle.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        completer = self.executor.batch
        if completer is not None:
            # commit and settle the completions handed over so far; a handler still
            # running after this commits its completion alone
            completer.stop(max(1.0, deadline - time.monotonic()))
        with self._idle:
            leases = list(self._leases)
            cancels = list(self._leases.values())
        # Release first, then tell the handlers: a handler that stops when told can then
        # no longer complete under the lease it was told to give up.
        # The database out of reach: what is left to write is skipped (the leases expire,
        # the worker reaper deletes the heartbeat row, other workers release the run).
        reachable = True
        if leases:
            reachable = self._bounded(
                functools.partial(self._release_leases, leases, bound),
                bound,
                f"the release of {len(leases)} lease(s)",
            )
        self._stop_heartbeat.set()
        for cancel in cancels:
            cancel.set()
        for _ in range(self.config.workers):
            self._tasks.put(None)
        # one budget for every thread, not one each: a thread still in a statement (one
        # that waits for a lock) is left behind, a daemon; its transaction is rolled back
        give_up = time.monotonic() + bound
        for thread in self._threads:
            limit = 0.5 if thread.name.startswith("cyclone-worker") else bound
            thread.join(timeout=max(0.0, min(limit, give_up - time.monotonic())))
        if reachable:  # after the heartbeat thread: no beat writes the row again
            reachable = self._bounded(
                functools.partial(self.heartbeat.unregister, wait=bound, statement_timeout_s=bound),
                bound,
                "the delete of the heartbeat row",
            )
        if reachable and self.only_run is not None:  # an isolated run: to the workers now
            self._bounded(self._release_isolated_run, bound, "the release of the isolated run")
        self.executor.event_loop.stop()  # cancels async handlers still running
        self.executor.step_logs.stop(timeout=bound)

    def _bounded(self, write: Callable[[], bool], bound: float, what: str) -> bool:
        """Run ``write`` (one of the shutdown's writes, its statements bounded to ``bound``
        seconds server-side) on a thread of its own and wait for it at most ``bound`` + 1
        s (a database that does not answer at all: it is left behind, a daemon). Returns
        what ``write`` returned (whether the database is still within reach), False when
        it did not end in time."""
        done: list[bool] = []
        thread = threading.Thread(
            target=lambda: done.append(write()), name="cyclone-shutdown-write", daemon=True
        )
        thread.start()
        thread.join(bound + 1.0)
        if not done:
            self.log.warning(
                "shutdown: %s did not end within %.1fs; left undone (leases lapse)", what, bound
            )
            return False
        return done[0]

    def _release_leases(self, leases: list[tuple[int, int]], bound: float) -> bool:
        """Give back ``leases`` at shutdown, each statement bounded to ``bound`` seconds;
        a failure is reported and leaves them to lapse. Whether the database is within
        reach."""
        try:
            with self.db.session(wait=min(BRIEF_POOL_WAIT_S, bound)) as s:
                session.session_bound_waits(s, seconds=bound)
                released = claim.release_leases(s, self.config.client_id, leases)
            self.publish(released)
        except Exception as exc:
            if wait_bound_passed(exc):  # e.g. the steps table locked by another session
                self.log.warning(
                    "shutdown: could not release %d lease(s) within %.1fs (%s); they are "
                    "left to lapse and the recovery sweep reclaims them",
                    len(leases),
                    bound,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                )
                return True
            self.reporter.trouble(
                "shutdown",
                exc,
                "could not release %d leases at shutdown; they are left to lapse",
                len(leases),
            )
            return not database_lost(exc)
        return True

    def _release_isolated_run(self) -> bool:
        """Hand this isolated run's steps to the other workers now (reported on failure);
        True."""
        try:
            self.owner_release.run_once()
        except Exception as exc:
            self.reporter.trouble(
                "shutdown", exc, "could not release the isolated run %s", self.only_run
            )
        return True

    def _end_claims(self) -> None:
        """Cancel the claim statement in flight (it may be waiting for a lock: nothing it
        could claim would run now), then wait for the claim loop to end, which releases
        what a claim returned after the stop (bounded: the release waits at most
        BRIEF_POOL_WAIT_S for a connection)."""
        loop = next((t for t in self._threads if t.name == "cyclone-claim"), None)
        give_up = time.monotonic() + BRIEF_POOL_WAIT_S + 1.0
        while loop is not None and loop.is_alive() and time.monotonic() < give_up:
            # again while it runs: a cancel that reached the server before the statement did
            # is ignored there
            with self._claim_guard:
                conn = self._claim_conn
                if conn is not None:
                    try:
                        conn.cancel_safe(timeout=BRIEF_POOL_WAIT_S)
                    except Exception as exc:  # it ends by itself; what it claims is released
                        self.log.info("shutdown: could not cancel the claim in flight: %s", exc)
            loop.join(timeout=0.2)

    # -- wakeups -----------------------------------------------------------------------

    def notice_available(self, queues: list[str]) -> None:
        """A ``cyclone_available`` notification named ``queues``: wake the claim loop at
        once when this worker serves one of them, else ignore it (Engine Design: each
        worker forwards only the wakeups for the queues it serves)."""
        if self.served.isdisjoint(queues):
            self.wakeups_ignored += 1
            return
        self.wakeups_forwarded += 1
        self._wake.set()

    def wake(self) -> None:
        """Make the claim loop claim now (e.g. after the listener reconnected: wakeups sent
        while it was not listening are lost)."""
        self._wake.set()

    # -- claim loop --------------------------------------------------------------------

    def _claim_loop(self) -> None:
        lo, hi = self.config.poll_interval
        interval = lo
        while not self._stop.is_set():
            self._wake.clear()
            try:
                claimed = self._claim_once()
            except Exception as exc:
                if self._stop.is_set():  # e.g. the claim the shutdown cancelled
                    break
                self.reporter.trouble("claim", exc, "claim failed; retrying after %.2fs", hi)
                self._stop.wait(hi)
                continue
            if claimed:
                interval = lo
                continue
            wait = interval
            if self._rate_due is not None:  # a rate key gets a claim back then
                wait = min(wait, max(self._rate_due - time.monotonic(), 0.0))
            woke = self._wake.wait(wait)
            interval = lo if woke else min(interval * 2, hi)

    def _claim_once(self) -> int:
        total = 0
        self._rate_due = None
        for queue_name, size in self.config.worker_queues.items():
            # Only this loop takes slots and worker threads only free them, so ``free``
            # can only grow while the claim runs.
            with self._lock:
                free = size - self._busy[queue_name]
            if free <= 0 or self._stop.is_set():
                continue
            steps: list[ClaimedStep] = []
            limited = self._limited[queue_name]
            now = time.monotonic()
            if not limited.active and now >= limited.next_try:
                limited.next_try = now + self.config.poll_interval[1]
                limited.active = retry_conflicts(functools.partial(self._has_limited, queue_name))
            if limited.active:
                # limited steps first (they are bounded by their limits), then the others
                self.claim_queries += 1
                try:
                    got = retry_conflicts(functools.partial(self._claim_limited, queue_name, free))
                except Exception as exc:
                    # the queue's other steps are still claimed; the limited claim is tried
                    # again after poll_interval max (a claim the shutdown cancelled: quiet)
                    limited.active = False
                    if self._stop.is_set():
                        continue
                    self.reporter.trouble(
                        "claim",
                        exc,
                        "limited claim of queue %r failed; retrying after %.2fs",
                        queue_name,
                        self.config.poll_interval[1],
                    )
                else:
                    steps += got.steps
                    limited.cursor = got.cursor
                    limited.active = got.more or bool(got.steps)
                    if got.retry_in_s is not None:  # claim again when a token is back
                        due = time.monotonic() + max(got.retry_in_s, _RATE_RETRY_FLOOR_S)
                        if self._rate_due is None or due < self._rate_due:
                            self._rate_due = due
            if len(steps) < free and not self._stop.is_set():
                self.claim_queries += 1
                try:
                    steps += retry_conflicts(
                        functools.partial(self._claim, queue_name, free - len(steps))
                    )
                except Exception as exc:
                    if not steps:
                        raise
                    # the limited steps in hand are run (or released) all the same
                    if not self._stop.is_set():
                        self.log.warning(
                            "claim of queue %r failed",
                            queue_name,
                            exc_info=not (database_lost(exc) or prepared_statement_lost(exc)),
                        )
            with self._lock:
                stopping = self._stop.is_set()  # the shutdown's lease list is taken later
                if not stopping:
                    self._busy[queue_name] += len(steps)
                    for step in steps:
                        self._leases[(step.id, step.lease_generation)] = HeldLease()
            if stopping:
                self._release_claimed(steps)
                continue
            for step in steps:
                self._tasks.put(step)
                self.reporter.report(
                    StepEvent(
                        EventKind.CLAIMED,
                        step.run_id,
                        step.node,
                        step.id,
                        step.attempt,
                        queue=step.queue,
                        wait_s=step.wait_s,
                    )
                )
            total += len(steps)
        return total

    @contextmanager
    def _claim_session(self) -> Iterator[Session]:
        """An autocommit session for one claim (or probe), its connection known to
        :meth:`_end_claims` while it is in use."""
        with self.db.autocommit_session() as s:
            with self._claim_guard:
                if self._stop.is_set():
                    raise _Stopped
                self._claim_conn = s.conn
            try:
                yield s
            finally:
                with self._claim_guard:
                    self._claim_conn = None

    def _release_claimed(self, steps: Sequence[ClaimedStep]) -> None:
        """Give back at once the steps a claim returned after the shutdown began (as the
        shutdown releases the running ones: no attempt and no reclaim charged); when that
        fails, their leases lapse."""
        if not steps:
            return
        leases = [(step.id, step.lease_generation) for step in steps]
        try:
            with self.db.session(wait=BRIEF_POOL_WAIT_S) as s:
                session.session_bound_waits(s, seconds=self._write_bound)
                released = claim.release_leases(s, self.config.client_id, leases)
            self.publish(released)
        except Exception as exc:
            self.reporter.trouble(
                "shutdown", exc, "could not release %d steps claimed at shutdown", len(leases)
            )
        else:
            self.log.info("shutdown: released %d step(s) claimed meanwhile", len(leases))

    def _claim(self, queue_name: str, free: int) -> list[ClaimedStep]:
        """One claim statement (autocommit) for up to ``free`` steps of ``queue_name``."""
        with self._claim_session() as s:
            return claim.claim(
                s,
                self.config.client_id,
                self.config.lease_ttl,
                [queue_name],
                free,
                self.only_run,
                skip_calls=self.executor.backoff.calls(),  # given back lately: not ours
            )

    def _has_limited(self, queue_name: str) -> bool:
        """Whether ``queue_name`` has available limited steps (one round trip, no lock)."""
        with self._claim_session() as s:
            return claim.has_limited(s, queue_name)

    def _claim_limited(self, queue_name: str, free: int) -> claim.LimitedClaims:
        """The limited claim (a transaction in one round trip) for up to ``free`` steps of
        ``queue_name``, from the key after this queue's cursor."""
        with self._claim_session() as s:
            return claim.claim_limited(
                s,
                self.config.client_id,
                self.config.lease_ttl,
                queue_name,
                free,
                self._limited[queue_name].cursor,
                self.only_run,
            )

    # -- worker threads ------------------------------------------------------------------

    def _work_loop(self) -> None:
        while True:
            step = self._tasks.get()
            if step is None:
                return
            key = (step.id, step.lease_generation)
            with self._lock:
                cancel = self._leases.get(key) or threading.Event()
            handed_over = False
            # a limited step's end frees a slot of its key: claim again once it committed
            freed = isinstance(step, LimitedClaim)
            try:
                handed_over = self.executor.execute(
                    step,
                    cancel,
                    on_settled=functools.partial(self._settled, key, freed),
                    lease_lost=cancel.lost if isinstance(cancel, HeldLease) else None,
                )
            except BaseException:  # never lose a worker thread
                self.log.exception("worker thread: step %s failed unexpectedly", step.id)
            finally:
                # the worker slot is free; a completion handed to the completer keeps its
                # lease (renewed by the heartbeat) until it is settled
                with self._idle:
                    if not handed_over:
                        self._leases.pop(key, None)
                    elif key in self._leases:  # else already settled: nothing to track
                        self._handed.add(key)
                    self._busy[step.queue] -= 1
                    self._idle.notify_all()
                self._wake.set()

    def _settled(self, key: tuple[int, int], freed: bool = False) -> None:
        """The completer committed (or gave up) a handed-over completion: drop its lease;
        for a limited step (``freed``), wake the claim loop (its key has a slot free now;
        the completion's wakeups tell the other processes: ``Settler.committed``)."""
        with self._idle:
            self._leases.pop(key, None)
            self._handed.discard(key)
            self._idle.notify_all()
        if freed:
            self._wake.set()

    # -- heartbeat and maintenance --------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        self.heartbeat.run(self._stop_heartbeat)

    def _maintenance_loop(self) -> None:
        self.maintenance.run(self._stop)
