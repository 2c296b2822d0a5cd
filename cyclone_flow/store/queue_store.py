"""Store methods of the queue features (seeds: Queues and Priority, Unique Jobs, Sequences,
schedule options): the named statements of ``sql/queue.sql`` and ``sql/schedules.sql``,
and :meth:`QueueStoreMixin.insert_run`, the one insert path of a new top run (its steps
come from the definition's plan through :class:`cyclone_flow.store.advance.RunAdvance`).

:class:`QueueStoreMixin` is part of :class:`cyclone_flow.store.store.Store` (its base
class), kept in its own module so the concern reads as one piece; like the rest of the
store it is the only code that runs these statements. Methods that take a ``conn`` run
inside the caller's transaction and never commit.

Lock order (no deadlock between these paths): a run's row lock, then its sequence's row
lock (``cyclone_sequences``), then other runs of the sequence only with ``SKIP LOCKED``.
Submit takes only the sequence lock (its run is new).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from cyclone_flow.flowfile.model import Flow
from cyclone_flow.options import RunOptions

if TYPE_CHECKING:
    from cyclone_flow.store.advance import Advance
    from cyclone_flow.store.store import Wakeups

Conn = psycopg.Connection[Any]


class SequenceLookup(enum.Enum):
    """Marker of :meth:`QueueStoreMixin.release_sequence_after`: the key is not known yet."""

    READ = "read"


@dataclass(frozen=True)
class InsertedRun:
    """What a queued insert did: the run id, whether this call created it (False: a unique
    key matched an existing run and nothing was written), and whether it is held behind an
    earlier run of its sequence."""

    run_id: str
    created: bool
    held: bool = False


@dataclass(frozen=True)
class ScheduleRow:
    """One row of ``cyclone_schedules`` (instants are UTC-aware datetimes)."""

    id: int
    name: str
    flow_name: str
    cron: str
    timezone: str
    input: Any
    source: str
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_run_id: str | None


@dataclass(frozen=True)
class DueRef:
    """A due schedule as the scanner lists it: id, name and ``version``, a digest of its
    whole row (it changes with any edit: sync, add, pause/resume, a tick)."""

    id: int
    name: str
    version: str


@dataclass(frozen=True)
class DueSchedule:
    """A due schedule locked by the scanner's transaction, with its flow definition (the
    flow file as JSON) and the id of that stored definition (``no_plan``: stored before
    compiled plans existed)."""

    id: int
    name: str
    cron: str
    timezone: str
    input_json: str
    next_run_at: datetime
    definition: dict[str, Any]
    workflow_id: int = 0
    no_plan: bool = False


class QueueStoreMixin:
    """Unique runs, sequences, delayed roots and cron schedules (see the module doc)."""

    pool: ConnectionPool[Any]
    schema: str
    q: dict[str, str]

    if TYPE_CHECKING:

        def store_definition(self, conn: Conn, flow: Flow) -> int: ...

        def _insert_run_steps(
            self,
            conn: Conn,
            run_id: str,
            workflow_id: int,
            root_run_id: str | None,
            acc: Advance,
            *,
            queue: str | None = None,
            priority: int | None = None,
            hold: bool = False,
            run_at: datetime | None = None,
            delay_us: int | None = None,
        ) -> None: ...

        def _release(self, conn: Conn, run_id: str, node: str | None, acc: Advance) -> bool: ...

    # -- runs ----------------------------------------------------------------------------

    def insert_run(
        self,
        conn: Conn,
        workflow_id: int,
        input_json: str,
        options: RunOptions,
        acc: Advance,
        *,
        output_limit: int | None = None,
        max_signal_wait_s: float | None = None,
    ) -> InsertedRun:
        """Write a new top run of the stored definition ``workflow_id`` with its
        per-submission ``options``, its steps and its deps, inside the caller's transaction:
        the one insert path of submit, enqueue, their ``_tx`` forms, ``ctx.submit_completion``
        / ``ctx.enqueue_completion`` and schedule ticks (child runs are inserted by the
        engine: :meth:`RunAdvance._start_child`).

        - The run row records ``output_limit`` (bytes) and ``max_signal_wait_s`` (seconds,
          None: no cap), the submitting client's, and the flow's ``deadline`` (counted from
          ``run_at`` for a delayed run) (Client Options: Limits and Retention,
          WithMaxSignalWait).
        - With a ``unique_key``: ``INSERT ... ON CONFLICT DO NOTHING`` on the partial unique
          index of ``unique_slot``, then the winner is read (race-free: a concurrent insert
          of the same key waits for the other transaction and then conflicts or succeeds);
          nothing else is written for a duplicate.
        - With a ``sequence``: the sequence's row lock is taken first and the run is held
          (every step ``pending``, no node started) while an earlier run of the sequence is
          neither completed nor cancelled.
        - Steps and deps come from the definition's plan in SQL, with ``queue``/``priority``
          overriding the nodes that do not set their own; with ``run_at``/``delay_s`` no
          step of the run is claimable before that instant (database clock). Roots that are
          not actions (fan_out, child, wait_signal) are started in this transaction unless
          the run is held.

        The wakeups and engine events go to ``acc``.
        """
        seq_pos: int | None = None
        held = False
        if options.sequence is not None:
            row = conn.execute(
                self.q["sequence_take_next_pos"], {"key": options.sequence}
            ).fetchone()
            assert row is not None
            seq_pos = int(row[0])
            got = conn.execute(
                self.q["run_exists_open_in_sequence"], {"key": options.sequence}
            ).fetchone()
            held = bool(got and got[0])
        delay_us = round(options.delay_s * 1_000_000) if options.delay_s else None
        params = {
            "workflow_id": workflow_id,
            "input": input_json,
            "unique_key": options.unique_key,
            "unique_window_s": options.unique_window_s,
            "unique_states": list(options.unique_states) if options.unique_states else None,
            "sequence_key": options.sequence,
            "sequence_pos": seq_pos,
            "sequence_held": held,
            "schedule_id": options.schedule_id,
            "scheduled_for": options.scheduled_for,
            "output_limit": output_limit,
            "max_signal_wait_s": max_signal_wait_s,
            "run_at": options.run_at,
            "delay_us": delay_us,
        }
        for _ in range(100):
            inserted = conn.execute(self.q["run_insert"], params).fetchone()
            if inserted is not None:
                break
            holder = conn.execute(
                self.q["run_get_unique_holder"],
                {"unique_key": options.unique_key, "unique_window_s": options.unique_window_s},
            ).fetchone()
            if holder is not None:
                return InsertedRun(str(holder[0]), created=False)
            if options.unique_key is None:  # no conflict possible: the definition is gone
                raise RuntimeError(f"definition {workflow_id} of the run is not stored")
            # the holder left its covered states between our insert and our read: again
        else:  # pragma: no cover - would need 100 runs finishing in between
            raise RuntimeError(f"unique key {options.unique_key!r} keeps changing hands")
        run_id = str(inserted[0])
        self._insert_run_steps(
            conn,
            run_id,
            workflow_id,
            None,
            acc,
            queue=options.queue,
            priority=options.priority,
            hold=held,
            run_at=options.run_at,
            delay_us=delay_us,
        )
        return InsertedRun(run_id, created=True, held=held)

    # -- sequences -----------------------------------------------------------------------

    def release_sequence_after(
        self,
        conn: Conn,
        run_id: str,
        acc: Advance,
        sequence_key: str | SequenceLookup | None = SequenceLookup.READ,
    ) -> None:
        """After run ``run_id`` became completed or cancelled, under its row lock in the
        same transaction: release the next held run of its sequence (no-op outside one).
        ``sequence_key``: the run's key when the caller already read it (None: the run is
        in no sequence, nothing to do and no statement sent); left out, it is read here."""
        if isinstance(sequence_key, SequenceLookup):
            row = conn.execute(self.q["run_get_sequence"], {"run_id": run_id}).fetchone()
            sequence_key = None if row is None or row[0] is None else str(row[0])
        if sequence_key is None:
            return
        self._release_sequence(conn, sequence_key, acc)

    def _release_sequence(self, conn: Conn, key: str, acc: Advance) -> bool:
        """Unhold the head run of sequence ``key`` when it is held, and release its roots
        as at submit: actions become available (a delay it was given is kept), other node
        types start. Returns whether a run was released."""
        conn.execute(self.q["sequence_lock"], {"key": key})
        rows = conn.execute(self.q["run_release_next_in_sequence"], {"key": key}).fetchall()
        for (run_id,) in rows:
            self._release(conn, str(run_id), None, acc)
        return bool(rows)

    def release_stalled_sequences(self, batch: int = 100) -> tuple[int, Wakeups]:
        """Maintenance safety net: release the first open run of every sequence whose
        predecessors all finished but which is still held. Returns (sequences released,
        wakeups to publish)."""
        from cyclone_flow.store.advance import Advance
        from cyclone_flow.store.store import Wakeups

        wakeups = Wakeups()
        with self.pool.connection() as conn:
            keys = [
                r[0] for r in conn.execute(self.q["run_list_stalled_sequences"], {"batch": batch})
            ]
        released = 0
        for key in keys:
            acc = Advance(Wakeups())
            with self.pool.connection() as conn, conn.transaction():
                done = self._release_sequence(conn, key, acc)
            if done:
                released += 1
            wakeups.merge(acc.wakeups)
        return released, wakeups

    def cancel_failed_in_sequence(self, conn: Conn, run_id: str, reason: str) -> bool:
        """failed -> cancelled for a run of a sequence (the caller holds the run lock), so
        the runs held behind it go on; False for any other run."""
        row = conn.execute(
            self.q["run_cancel_if_failed_in_sequence"], {"run_id": run_id, "error": reason}
        ).fetchone()
        return row is not None

    def run_sequence_key(self, conn: Conn, run_id: str) -> str | None:
        """The sequence key of a run, None when it is in none."""
        row = conn.execute(self.q["run_get_sequence"], {"run_id": run_id}).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def queue_info(self, run_id: str) -> dict[str, Any] | None:
        """The unique/sequence/schedule columns of a run (``status``), None if unknown."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            row = cur.execute(self.q["run_get_queue_info"], {"run_id": run_id}).fetchone()
        return dict(row) if row else None

    # -- time ------------------------------------------------------------------------------

    def db_now(self, now: datetime | None = None) -> datetime:
        """The database's ``now()``, or ``now`` when a test pins it."""
        with self.pool.connection() as conn:
            row = conn.execute(self.q["pg_now"], {"now": now}).fetchone()
        assert row is not None
        value: datetime = row[0]
        return value

    # -- schedules -----------------------------------------------------------------------

    def upsert_schedule(
        self,
        conn: Conn,
        *,
        name: str,
        flow: Flow,
        cron: str,
        timezone: str,
        input_json: str,
        source: str,
        next_run_at: datetime,
    ) -> bool:
        """Create or update the schedule ``name``; True when it was created."""
        workflow_id = self.store_definition(conn, flow)
        row = conn.execute(
            self.q["schedule_upsert"],
            {
                "name": name,
                "flow_name": flow.name,
                "workflow_id": workflow_id,
                "cron": cron,
                "timezone": timezone,
                "input": input_json,
                "source": source,
                "next_run_at": next_run_at,
            },
        ).fetchone()
        assert row is not None
        return bool(row[1])

    def schedule_source(self, conn: Conn, name: str) -> str | None:
        """``flow`` or ``manual`` for an existing schedule, None when there is none."""
        row = conn.execute(self.q["schedule_get_source"], {"name": name}).fetchone()
        return None if row is None else str(row[0])

    def delete_stale_flow_schedules(self, conn: Conn, flow_name: str, keep: list[str]) -> list[str]:
        """Delete the ``flow`` schedules of ``flow_name`` not named in ``keep``."""
        rows = conn.execute(
            self.q["schedule_delete_flow_stale"], {"flow_name": flow_name, "keep": keep}
        ).fetchall()
        return sorted(r[0] for r in rows)

    def delete_schedule(self, name: str) -> bool:
        """Delete one schedule; False when none has that name."""
        with self.pool.connection() as conn:
            return conn.execute(self.q["schedule_delete"], {"name": name}).fetchone() is not None

    def set_schedule_paused(
        self, name: str, paused: bool, next_run_at: datetime | None = None
    ) -> bool:
        """Pause or resume a schedule (resume passes the next tick after now); False when
        none has that name."""
        with self.pool.connection() as conn:
            row = conn.execute(
                self.q["schedule_set_paused"],
                {"name": name, "paused": paused, "next_run_at": next_run_at},
            ).fetchone()
        return row is not None

    def get_schedule(self, name: str) -> ScheduleRow | None:
        """One schedule by name, None when there is none."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            row = cur.execute(self.q["schedule_get"], {"name": name}).fetchone()
        return None if row is None else _schedule_row(row)

    def list_schedules(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        with self.pool.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            rows = cur.execute(self.q["schedule_list"]).fetchall()
        return [_schedule_row(r) for r in rows]

    def list_due_schedules(self, now: datetime, batch: int) -> list[DueRef]:
        """Unpaused schedules due at ``now``, earliest first (at most ``batch``)."""
        with self.pool.connection() as conn:
            rows = conn.execute(
                self.q["schedule_list_due"], {"now": now, "batch": batch}
            ).fetchall()
        return [DueRef(int(r[0]), r[1], r[2]) for r in rows]

    def lock_due_schedule(self, conn: Conn, schedule_id: int, now: datetime) -> DueSchedule | None:
        """Lock a due schedule for this transaction (SKIP LOCKED); None when another client
        holds it or it is no longer due."""
        cur = conn.cursor(row_factory=dict_row)
        row = cur.execute(self.q["schedule_lock_due"], {"id": schedule_id, "now": now}).fetchone()
        if row is None:
            return None
        return DueSchedule(
            id=row["id"],
            name=row["name"],
            cron=row["cron"],
            timezone=row["timezone"],
            input_json=row["input"],
            next_run_at=row["next_run_at"],
            definition=row["definition"],
            workflow_id=row["workflow_id"],
            no_plan=row["no_plan"],
        )

    def advance_schedule(
        self,
        conn: Conn,
        *,
        schedule_id: int,
        expected: datetime,
        next_run_at: datetime,
        tick: datetime,
        run_id: str,
    ) -> bool:
        """The tick's compare-and-swap on ``next_run_at``; False when stale."""
        row = conn.execute(
            self.q["schedule_advance_if_unchanged"],
            {
                "id": schedule_id,
                "expected": expected,
                "next_run_at": next_run_at,
                "tick": tick,
                "run_id": run_id,
            },
        ).fetchone()
        return row is not None


def _schedule_row(row: dict[str, Any]) -> ScheduleRow:
    return ScheduleRow(
        id=row["id"],
        name=row["name"],
        flow_name=row["flow_name"],
        cron=row["cron"],
        timezone=row["timezone"],
        input=row["input"],
        source=row["source"],
        paused=row["paused"],
        next_run_at=row["next_run_at"],
        last_run_at=row["last_run_at"],
        last_run_id=None if row["last_run_id"] is None else str(row["last_run_id"]),
    )
