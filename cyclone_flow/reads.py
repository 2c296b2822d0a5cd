"""The dashboard's reads of one schema: what ``Client.reads`` delegates to (the overview's
counts and warnings, the runs page, the stored flows, a step's items and log tail). The
reads of a run every caller uses (``get_run``, ``list_steps``, ``explain``, ...) stay on
:class:`~cyclone_flow.Client`. Each method reads in one short session of its own.
"""

from __future__ import annotations

from datetime import datetime

from cyclone_flow.db import runs, step_logs, steps, workflows
from cyclone_flow.db.conn import Database
from cyclone_flow.db.errors import BRIEF_POOL_WAIT_S
from cyclone_flow.db.rows import FlowRow, QueueThroughput, ReclaimedStep, Run, Step, StepLogLine
from cyclone_flow.errors import ConfigError, RunNotFoundError
from cyclone_flow.run_ids import parse_run_id
from cyclone_flow.text import storable

__all__ = ["READS", "Reads"]

READS = (
    "queue_throughput",
    "list_runs_page",
    "count_runs_by_state",
    "list_flows",
    "get_flow",
    "count_leases",
    "list_reclaimed_steps",
    "list_runs_past_deadline",
    "list_held_sequences",
    "list_items",
    "step_log_node_tail",
)
"""The methods of :class:`Reads` (``Client`` keeps each as a deprecated alias)."""


class Reads:
    """The dashboard reads of ``db``'s schema (``client.reads``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- the overview ----------------------------------------------------------------------

    def queue_throughput(self, *, cap: int = 10_000) -> list[QueueThroughput]:
        """Per queue, the steps finished (completed or discarded) in the last minute and the
        last hour by the database's clock, at most ``cap`` counted (a count of ``cap``
        means at least that many). Counted through their runs (no index on a step's finish
        time): runs finished in the hour, and runs with a step running or claimable now
        (up to 1,000 of the latter); a step of a run doing neither (a run waiting for a
        signal) is left out. Queues with nothing finished are left out."""
        with self._db.session() as s:
            return steps.step_count_finished_by_queue(s, cap=cap, active=1000)

    def count_runs_by_state(self, age_s: float, *, cap: int = 10_000) -> dict[str, int]:
        """Runs created in the last ``age_s`` seconds (database clock) by state; at most
        ``cap`` runs are counted (the newest), so a sum equal to ``cap`` means "at least"."""
        with self._db.session() as s:
            return runs.run_count_states_since(s, age_s=float(age_s), cap=int(cap))

    def count_leases(self) -> dict[str, int]:
        """Running steps per lease owner (a worker's client id): what each worker holds."""
        with self._db.session() as s:
            return steps.step_count_by_lease_owner(s)

    def list_reclaimed_steps(
        self, *, min_reclaims: int = 1, limit: int = 20
    ) -> list[ReclaimedStep]:
        """Unfinished steps reclaimed more than ``min_reclaims`` times (their workers keep
        dying or losing their leases), most reclaims first, at most ``limit``: the running
        ones, and the available ones among the first 1,000 of each queue's claim order
        (a reclaimed step keeps its ``scheduled_at``, so it waits at its queue's head)."""
        with self._db.session() as s:
            return steps.step_list_reclaimed(s, min_reclaims=min_reclaims, limit=limit)

    def list_runs_past_deadline(self, *, limit: int = 20) -> list[str]:
        """Ids of running runs past their deadline that the deadline scanner has not
        failed yet (no started client runs it, or it is behind)."""
        with self._db.session() as s:
            return runs.run_list_past_deadline(s, batch=limit)

    def list_held_sequences(self, *, limit: int = 20) -> list[str]:
        """Keys of sequences whose first open run is still held (nothing releases it)."""
        with self._db.session() as s:
            return runs.run_list_stalled_sequences(s, batch=limit)

    # -- the runs page ---------------------------------------------------------------------

    def list_runs_page(
        self,
        *,
        limit: int = 50,
        flow: str | None = None,
        state: str | None = None,
        unique_key: str | None = None,
        queue: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, str] | None = None,
        revision: int | None = None,
    ) -> list[Run]:
        """One page of runs, newest first: at most ``limit`` (1 to 1000) after the keyset
        ``after`` (``(run.created_at, run.id)`` of the last run of the previous page; no
        OFFSET), of ``flow``, in ``state``, with ``unique_key``, with a step on ``queue``,
        created in ``[since, until)`` when given, submitted with deployed revision
        ``revision`` of ``flow`` (``revision`` without ``flow``: of any flow). Raises
        ConfigError for a bad limit, RunNotFoundError for an ``after`` id that is not a
        run id."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise ConfigError(f"limit must be an integer from 1 to 1000, got {limit!r}")
        texts = (flow, state, unique_key, queue)
        if any(v is not None and not storable(v) for v in texts):
            return []  # no run has such a value
        if after is not None:
            after = (after[0], parse_run_id(after[1]))
        with self._db.session() as s:
            return runs.run_list_page(
                s,
                limit=limit,
                flow=flow,
                state=state,
                unique_key=unique_key,
                queue=queue,
                since=since,
                until=until,
                after=after,
                revision=revision,
            )

    # -- stored flows ----------------------------------------------------------------------

    def list_flows(self, *, limit: int = 200, name: str | None = None) -> list[FlowRow]:
        """Stored flow definitions (name, digest, first and last use), newest first,
        without their document (:meth:`get_flow` has it)."""
        if name is not None and not storable(name):
            return []
        with self._db.session() as s:
            return workflows.workflow_list(s, limit=limit, name=name)

    def get_flow(self, flow_id: int) -> FlowRow | None:
        """One stored flow definition with its document (``definition``); None if unknown."""
        with self._db.session() as s:
            return workflows.workflow_get(s, id=int(flow_id))

    # -- the step page ---------------------------------------------------------------------

    def list_items(self, run_id: str, node: str, *, start: int = 0, limit: int = 50) -> list[Step]:
        """The item steps of fan-out node ``node``, in item order from item index ``start``,
        at most ``limit`` (a keyset page: the next one starts after the last index); [] for
        a node with no items. Raises RunNotFoundError for an unknown run."""
        rid = parse_run_id(run_id)
        if not storable(node):
            return []
        with self._db.session(wait=BRIEF_POOL_WAIT_S) as s:
            if runs.run_get(s, run_id=rid) is None:
                raise RunNotFoundError(rid)
            return steps.step_list_items_page(
                s, run_id=rid, node=node, start=max(0, start), limit=max(0, limit)
            )

    def step_log_node_tail(
        self, run_id: str, node: str, limit: int = 200
    ) -> tuple[list[StepLogLine], int]:
        """The last ``limit`` log lines of ``node`` (a fan-out node: its items too) in
        write order, and how many lines it has in all (the step page shows the tail of a
        running step). Raises RunNotFoundError."""
        rid = parse_run_id(run_id)
        with self._db.session() as s:
            lines = step_logs.step_log_list_node_tail(s, run_id=rid, node=node, limit=limit)
            total = step_logs.step_log_count_node(s, run_id=rid, node=node) if lines else 0
            if not lines and runs.run_get(s, run_id=rid) is None:
                raise RunNotFoundError(rid)
        return lines, total
