"""Typed rows of the named statements, built by column name (:func:`rows_of`).

The public rows (:class:`Run`, :class:`Step`, :class:`ClaimedStep`, :class:`QueueStats`,
:class:`ScheduleRow`, :class:`DueSchedule`, :class:`WorkerRow`, :class:`StepLogLine`) are
frozen dataclasses; the ``RETURNING`` rows the engine reads are small NamedTuples. Every
``uuid`` column comes back as ``str`` (run ids are text everywhere in cyclone-flow), every
timestamp as an aware ``datetime`` (UTC).
No code outside :mod:`cyclone_flow.db` reads a row by position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from psycopg.rows import RowFactory, RowMaker, no_result

from cyclone_flow._json import JSON
from cyclone_flow.states import RunState, StepState

R = TypeVar("R")

_UUID_OID = 2950


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def rows_of(
    cls: Callable[..., R],
    *,
    columns: Mapping[str, str] | None = None,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
) -> RowFactory[R]:
    """A psycopg row factory that builds ``cls`` (a NamedTuple or dataclass) from each row
    BY COLUMN NAME: each field takes the column of its name (``columns`` renames a column,
    e.g. an unnamed ``CASE`` column, to a field), whatever the statement's column order;
    columns without a field are ignored. ``uuid`` columns become ``str``; ``convert`` maps a
    field to a function applied to its value (e.g. a state to its enum).

    The plan (which column feeds which field, and how) is computed once per column
    layout and cached, so a result costs a look at its column names and types and a row
    one call of ``cls``. Raises TypeError at the first row when a field has no column."""
    fields: tuple[str, ...] = (
        tuple(f.name for f in dataclasses.fields(cls))
        if dataclasses.is_dataclass(cls)
        else cls._fields  # type: ignore[attr-defined]
    )
    renames = dict(columns or {})
    converters = dict(convert or {})
    makers: dict[tuple[tuple[bytes | None, ...], tuple[int, ...]], RowMaker[R]] = {}

    def plan(names: tuple[bytes | None, ...], types: tuple[int, ...], encoding: str) -> RowMaker[R]:
        text = [b.decode(encoding) if b is not None else "" for b in names]
        where = {renames.get(name, name): i for i, name in enumerate(text)}
        missing = [f for f in fields if f not in where]
        if missing:
            raise TypeError(f"{getattr(cls, '__name__', cls)}: no column for {missing}")
        steps: list[tuple[int, Callable[[Any], Any] | None]] = []
        for name in fields:
            i = where[name]
            fn = converters.get(name)
            if fn is None and types[i] == _UUID_OID:
                fn = _text
            steps.append((i, fn))
        if all(fn is None for _, fn in steps):
            order = [i for i, _ in steps]
            if order == list(range(len(names))):
                return lambda values: cls(*values)
            return lambda values: cls(*[values[i] for i in order])
        return lambda values: cls(*[values[i] if fn is None else fn(values[i]) for i, fn in steps])

    def factory(cursor: Any) -> RowMaker[R]:
        res = cursor.pgresult
        if res is None or not res.nfields:
            return no_result
        span = range(res.nfields)
        key = (tuple(map(res.fname, span)), tuple(map(res.ftype, span)))
        maker = makers.get(key)
        if maker is None:
            maker = makers[key] = plan(key[0], key[1], cursor.connection.info.encoding)
        return maker

    return factory


# -- public rows ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClaimedStep:
    """A step this client claimed: the lease is identified by ``(id, lease_generation)``.

    ``input`` is the node's unresolved input template; ``timeout_s`` is seconds or None;
    ``wait_s`` the seconds it waited claimable (from ``scheduled_at``) before this claim.
    A fan-out item also has ``parent_node`` (its fan-out node), ``item_index`` (0-based)
    and ``item`` (its list element). ``run_input_text`` is the run's input as JSON text
    when the claim prefetched it (the node may need it), else None (Output Resolution).
    ``traceparent`` is the W3C trace context of the run's submitter (None: not traced);
    ``flow_name`` the run's flow, read only for a traced step.
    """

    id: int
    run_id: str
    node: str
    type: str
    call: str | None
    queue: str
    attempt: int
    max_attempts: int
    reclaims: int
    lease_generation: int
    input: JSON
    timeout_s: float | None
    wait_s: float = 0.0
    parent_node: str | None = None
    item_index: int | None = None
    item: JSON = None
    run_input_text: str | None = None
    traceparent: str | None = None
    flow_name: str | None = None


@dataclasses.dataclass(frozen=True)
class LimitedClaim(ClaimedStep):
    """A limited step this client claimed (``step_claim_limited_if_available``):
    ``limit_key`` is the key the claim walked it under (its concurrency key, else its
    rate key), where the next limited claim starts after (round robin)."""

    limit_key: str = ""


@dataclasses.dataclass(frozen=True)
class Run:
    """One row of ``cyclone_runs`` (timestamps from the database, UTC)."""

    id: str
    flow_name: str
    state: RunState
    input: JSON
    output: JSON
    error: str | None
    error_kind: str | None
    created_at: datetime
    finished_at: datetime | None
    digest: str
    parent_run_id: str | None = None
    parent_node: str | None = None
    deadline_at: datetime | None = None
    rerun_of: str | None = None
    """The run this run is a rerun of (``Client.rerun``), None for any other run."""
    revision: int | None = None
    """The deployed revision of its flow it was submitted with (``submit NAME``, a
    schedule of a deployed flow), None when submitted from a file or a ``Flow``."""


@dataclasses.dataclass(frozen=True)
class Step:
    """One row of ``cyclone_steps`` as reported by ``status`` and ``list_steps``.

    Node-type fields: ``parent_node`` and ``item_index`` (a fan-out item), ``items_total``
    and ``items_done`` (a started fan-out node), ``signal`` (a wait_signal node),
    ``child_run_id`` (a started child node), ``wait_until`` (when a child or signal wait
    expires; None: no bound), ``max_parallel`` (a fan-out node's bound on its items
    available or running at once; None: no bound). ``skip_reason`` (a skipped node): its
    ``when:`` as evaluated, ``{"when": TEXT, "values": {REF: VALUE}}``, or the skipped
    dependency that skipped it, ``{"upstream": NODE}``. ``reused_from``: the id of the step
    of the original run whose output a rerun took over (the step did not run). Limits
    (docs/flow-control.md): ``concurrency_key`` and ``concurrency_limit``, ``rate_key``,
    ``rate_limit`` and ``rate_per_s`` (seconds), None for a step without them.
    ``import_wait_since`` / ``import_wait_reason``: when a worker first gave the step back
    because it could not import or may not run its call, and the last such worker's
    account (docs/failures.md); None for a step nobody gave back.
    """

    id: int
    node: str
    type: str
    call: str | None
    state: StepState
    queue: str
    priority: int
    attempt: int
    max_attempts: int
    reclaims: int
    lease_owner: str | None
    lease_expiry: datetime | None
    lease_generation: int
    started_at: datetime | None
    finished_at: datetime | None
    scheduled_at: datetime
    output: JSON
    error: str | None
    error_kind: str | None
    errors: list[dict[str, Any]]
    parent_node: str | None = None
    item_index: int | None = None
    items_total: int | None = None
    items_done: int | None = None
    signal: str | None = None
    wait_until: datetime | None = None
    child_run_id: str | None = None
    max_parallel: int | None = None
    skip_reason: dict[str, Any] | None = None
    reused_from: int | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_per_s: float | None = None
    import_wait_since: datetime | None = None
    import_wait_reason: str | None = None


@dataclasses.dataclass(frozen=True)
class RateWindow:
    """A rate key's sliding log (``cyclone_rate_windows``, docs/flow-control.md): the
    claims ``bucket_claims[i]`` of the bucket that ends at ``bucket_ends[i]`` (in end
    order; a bucket counts while its end is after now minus the window), ``rate_per_s``
    the window of its last claim, in seconds."""

    rate_key: str
    rate_per_s: float
    bucket_ends: list[datetime]
    bucket_claims: list[int]


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """One queue's steps now: ``available`` (claimable: the depth), ``scheduled``
    (available at a later ``scheduled_at``, e.g. a retry in backoff), ``running``, and
    ``oldest_available_s``, seconds the oldest claimable step has waited (0 when none)."""

    queue: str
    available: int
    scheduled: int
    running: int
    oldest_available_s: float


@dataclasses.dataclass(frozen=True)
class QueueInfo:
    """A run's queue features (``run_get_queue_info``; seeds: Unique Jobs, Sequences): its
    ``unique_key`` (None: none) and whether it holds it now (``unique_held``) in the
    ``unique_states`` it is held in, its ``sequence_key`` and ``sequence_pos`` and whether
    the sequence holds it back (``sequence_held``), and the ``schedule_id`` and the tick
    (``scheduled_for``) of the schedule that triggered it (None: not triggered by one)."""

    unique_key: str | None
    unique_held: bool
    unique_states: list[str] | None
    sequence_key: str | None
    sequence_pos: int | None
    sequence_held: bool
    schedule_id: int | None
    scheduled_for: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """The columns by name: ``status --json``'s ``queue_features`` object."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class QueueThroughput:
    """One queue's steps finished (completed or discarded) in the ``last_minute`` and the
    ``last_hour`` (see ``Client.queue_throughput`` for what is counted)."""

    queue: str
    last_minute: int
    last_hour: int


@dataclasses.dataclass(frozen=True)
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
    revision: int | None = None
    """The deployed revision of the flow whose definition it submits (None: added or
    synced from a file)."""


@dataclasses.dataclass(frozen=True)
class WorkerRow:
    """One row of ``cyclone_workers``: a started client's heartbeat row.

    ``queues`` and ``slots`` (worker threads per queue) in the same order; ``only_run``:
    the run a ``cyclone-flow run`` process claims for alone (None: every run);
    ``lease_ttl_s`` seconds; ``live``: heartbeated within one ``lease_ttl`` of the
    database's now; ``last_seen_s``: seconds since its last beat."""

    client_id: str
    hostname: str
    pid: int
    queues: list[str]
    slots: list[int]
    only_run: str | None
    lease_ttl_s: float
    version: str
    started_at: datetime
    heartbeat_at: datetime
    live: bool
    last_seen_s: float

    def serves(self, queue: str, run_id: str | None = None) -> bool:
        """Whether this worker, live, claims steps of ``queue`` (of run ``run_id``)."""
        if not self.live or queue not in self.queues:
            return False
        return self.only_run is None or self.only_run == run_id


@dataclasses.dataclass(frozen=True)
class StepLogLine:
    """One row of ``cyclone_step_logs``: a line a handler logged or printed.

    ``stream`` is ``log`` (a ``logging`` record or ``ctx.log``; ``level`` its level
    name), ``stdout`` or ``stderr`` (``level`` None); ``generation`` is the claim's lease
    generation and ``seq`` the line's place in its attempt (0-based); ``at`` when the
    worker saw it (its clock, UTC). ``id`` orders a run's lines in write order."""

    id: int
    node: str
    attempt: int
    generation: int
    seq: int
    at: datetime
    stream: str
    level: str | None
    message: str


@dataclasses.dataclass(frozen=True)
class DueRef:
    """A due schedule as the scanner lists it: id, name and ``version``, a digest of its
    whole row (it changes with any edit: sync, add, pause/resume, a tick)."""

    id: int
    name: str
    version: str


@dataclasses.dataclass(frozen=True)
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
    revision: int | None = None
    flow_name: str = ""
    retired: bool = False
    """Its flow is a retired deployed flow (``flows retire``): no run is submitted."""


# -- RETURNING rows the engine reads ---------------------------------------------------------


class RunLock(NamedTuple):
    """``run_lock``: one locked run (``own``: the run asked for, not the root of its tree
    locked first) and its state."""

    own: bool
    state: RunState


class LockedRun(NamedTuple):
    """``run_lock_many``: one locked run and its state."""

    id: str
    state: RunState


class CompletedRun(NamedTuple):
    """``run_complete_if_done``: a run that just completed, its parent run and node (a
    child run) and its sequence key."""

    id: str
    parent_run_id: str | None
    parent_node: str | None
    sequence_key: str | None


class EndedRun(NamedTuple):
    """``run_fail_if_running`` / ``run_cancel_if_running``: a run that just failed or was
    cancelled, with its parent run and node (a child run)."""

    id: str
    parent_run_id: str | None
    parent_node: str | None


class DeadlineFailedRun(NamedTuple):
    """``run_fail_if_past_deadline``: a run failed by its deadline, and its error."""

    id: str
    parent_run_id: str | None
    parent_node: str | None
    error: str


class InsertedChild(NamedTuple):
    """``run_insert_child``: the child run, the root run of its tree and the trace
    context it inherited from its parent (None: not traced)."""

    id: str
    root_run_id: str
    traceparent: str | None = None


class InsertedStep(NamedTuple):
    """``step_insert_plan``: one inserted step's queue, state and whether it is claimable
    now."""

    queue: str
    state: StepState
    due: bool


class DisownedStep(NamedTuple):
    """``step_disown_if_owner_gone``: a step of an isolated run released to every worker:
    its queue and whether it is claimable now."""

    queue: str
    due: bool


class CompletedStep(NamedTuple):
    """``step_complete_if_leased``: the completed step's run, fan-out node (an item) and
    output as the database stores it (jsonb text)."""

    run_id: str
    parent_node: str | None
    output: str


class CompletedLease(NamedTuple):
    """``step_complete_if_leased_many``: one completed step of a group commit."""

    id: int
    lease_generation: int
    run_id: str
    parent_node: str | None
    output: str


class ReleasedStep(NamedTuple):
    """``step_release_if_ready`` / ``step_release_dependents_if_ready``: a released step (an
    action is now available, any other node type waiting and to be started);
    ``condition`` its ``when:`` text (None: it runs), decided in the same transaction."""

    run_id: str
    queue: str
    node: str
    type: str
    condition: str | None = None


class FailedAttempt(NamedTuple):
    """``step_fail_if_leased``: the step after its failed attempt (available again or
    discarded)."""

    run_id: str
    node: str
    state: StepState
    queue: str
    attempt: int
    parent_node: str | None


class RescuedStep(NamedTuple):
    """``step_rescue_if_lease_expired``: a step whose expired lease the sweep gave back."""

    id: int
    run_id: str
    node: str
    queue: str
    reclaims: int


class LeasedStep(NamedTuple):
    """``step_list_timed_out`` / ``step_list_reclaim_exhausted``: a running step and its
    lease generation."""

    id: int
    run_id: str
    node: str
    lease_generation: int


class StepOutput(NamedTuple):
    """``step_get_output``: a node's output as JSON text and its state."""

    output: str | None
    state: StepState


@dataclasses.dataclass(frozen=True)
class NodeOutput:
    """``step_get_output_shown``: one node's (or fan-out item's) output as a reader sees
    it (``cyclone-flow output``, ``Client.get_step_output``, the dashboard).

    ``output`` is the stored value, None while the step has none (``has_output`` False:
    it is not completed) and when it is over the reader's size cap (``truncated`` True);
    ``output_bytes`` the size of its JSON text (None: no output). ``type`` is the node's
    type; ``parent_node``/``item_index`` are set for a fan-out item; ``items_total`` for
    a started fan-out node."""

    node: str
    type: str
    state: StepState
    parent_node: str | None
    item_index: int | None
    items_total: int | None
    output: JSON
    output_bytes: int | None
    truncated: bool

    @property
    def has_output(self) -> bool:
        """Whether the step has its output: it completed (a skipped or unfinished step
        has none)."""
        return self.state == "completed"


class RerunSource(NamedTuple):
    """``run_get_rerun_source``: the run a rerun is made from (``input`` JSON text)."""

    id: str
    state: RunState
    workflow_id: int
    flow_name: str
    input: str
    input_schema: Any
    parent_run_id: str | None


class RerunStep(NamedTuple):
    """``step_list_rerun_source``: a top-level step of the run a rerun is made from, with
    what decides whether it can be reused."""

    id: int
    node: str
    type: str
    state: StepState
    input: JSON
    over: JSON
    condition: str | None


class ReusedStep(NamedTuple):
    """``step_reuse_from_run``: a step of a rerun after it took its queue (and, reused,
    its result) from the original run."""

    node: str
    state: StepState


class ConditionInputs(NamedTuple):
    """``step_get_condition_inputs``: what a ``when:`` condition reads, as JSON text: the
    run's input and ``{node: {"state", "output"}}`` for the nodes it names."""

    run_input: str | None
    upstream: str


class SkippedStep(NamedTuple):
    """``step_skip_dependents_if_pending``: a node skipped by skip-cascade, and its queue."""

    node: str
    queue: str


class ResetStep(NamedTuple):
    """``step_reset_if_discarded_or_cancelled``: a reset step and its fan-out node (an item)."""

    node: str
    parent_node: str | None


class NodeState(NamedTuple):
    """``step_get_state``: a node's state and its fan-out node (an item)."""

    state: StepState
    parent_node: str | None


class NodeInfo(NamedTuple):
    """``step_get_node_info``: what starting a released fan_out, child or wait_signal node
    needs (``not_before``: the start of a delayed run that has not started yet)."""

    type: str
    queue: str
    input: JSON
    over: JSON
    signal: str | None
    child_workflow_id: int | None
    child_input_schema: Any
    not_before: datetime | None


class ListShape(NamedTuple):
    """``step_get_list_shape``: the JSON type of a fan-out list (None: missing) and its
    length (an array)."""

    kind: str | None
    length: int | None


class ItemCounts(NamedTuple):
    """``step_set_items_total_if_waiting``: a started fan-out node's completed and total items."""

    items_done: int
    items_total: int


class ItemsDone(NamedTuple):
    """``step_add_items_done_if_waiting``: the fan-out node's counts and the queue of the
    items it released (None: none)."""

    items_done: int
    items_total: int
    queue: str | None


class DecidedNode(NamedTuple):
    """``step_complete_fan_out_if_waiting`` / ``step_complete_from_child_if_waiting``: the
    node's new state (completed, or discarded for an output over the limit), its error and
    its queue."""

    state: StepState
    error: str | None
    queue: str | None = None


class ExpiredWait(NamedTuple):
    """``step_list_expired_waits``: a waiting node past its ``wait_until``."""

    run_id: str
    node: str
    type: str
    signal: str | None
    child_run_id: str | None
    waited_s: float | None


class ExpiredNode(NamedTuple):
    """``step_discard_if_wait_expired``: the discarded node's type and the child run it
    waited for."""

    type: str
    child_run_id: str | None


class Downstream(NamedTuple):
    """``dep_list_downstream``: a node downstream of another and its on_dep_failure."""

    node: str
    on_dep_failure: str


class StoredWorkflow(NamedTuple):
    """``workflow_upsert``: the definition's id and whether its stored row lacks a plan."""

    id: int
    no_plan: bool


class SignalRoom(NamedTuple):
    """``signal_count_awaiting``: nodes still awaiting a signal name, and signals of that
    name kept unconsumed."""

    awaiting: int
    stored: int


@dataclasses.dataclass(frozen=True)
class FlowRow:
    """One stored definition of ``cyclone_workflows`` (``workflow_list``, ``workflow_get``):
    ``created_at`` is its first use (when it was stored), ``last_used_at`` the creation
    time of its newest run (None: no run left); ``definition`` only from ``workflow_get``."""

    id: int
    name: str
    digest: str
    created_at: datetime
    last_used_at: datetime | None
    definition: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class ReclaimedStep:
    """``step_list_reclaimed``: an unfinished step reclaimed more than once."""

    run_id: str
    node: str
    item_index: int | None
    state: StepState
    reclaims: int


# -- the health advisor (sql/health.sql) -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TableHealth:
    """``health_list_tables``: one hot table's vacuum state. ``live`` / ``dead`` are the
    statistics' tuple estimates; the ``last_*`` instants are None when it never happened;
    ``autovacuum_enabled`` is the server's ``autovacuum`` and the table's
    ``autovacuum_enabled`` option together; ``options`` its storage options as text."""

    table_name: str
    live: int
    dead: int
    last_autovacuum: datetime | None
    last_vacuum: datetime | None
    last_autoanalyze: datetime | None
    last_analyze: datetime | None
    autovacuum_count: int
    autovacuum_enabled: bool
    total_bytes: int
    options: str


@dataclasses.dataclass(frozen=True)
class OpenTransaction:
    """``health_list_open_transactions``: a transaction open for a while. ``age_s``
    seconds since it began; ``holds_xmin``: it holds a snapshot or a transaction id (so
    vacuum keeps every row version that died after it began); ``xmin_age`` in
    transactions."""

    pid: int
    datname: str | None
    usename: str | None
    application_name: str | None
    client_addr: str | None
    state: str | None
    backend_type: str | None
    xact_start: datetime
    query_start: datetime | None
    age_s: float
    holds_xmin: bool
    xmin_age: int
    query: str


@dataclasses.dataclass(frozen=True)
class XminHolder:
    """``health_list_xmin_slots``: a replication slot (``kind`` ``slot``) or prepared
    transaction (``prepared``) holding the xmin horizon back, ``xmin_age`` transactions
    old (``age_s``: seconds since a prepared transaction was prepared)."""

    kind: str
    name: str
    active: bool
    xmin_age: int
    age_s: float | None


@dataclasses.dataclass(frozen=True)
class IndexSize:
    """``health_get_claim_index``: an index's ``bytes`` and ``pages``, and the ``entries``
    its last vacuum or analyze counted (-1: never)."""

    bytes: int
    pages: int
    entries: float


@dataclasses.dataclass(frozen=True)
class OrphanedLeases:
    """``health_list_orphaned_leases``: running ``steps`` leased by ``lease_owner``, a
    client without a live heartbeat (``heartbeat_at`` None: no row), the last lease
    expiring at ``lease_expiry``."""

    lease_owner: str
    steps: int
    lease_expiry: datetime | None
    heartbeat_at: datetime | None


@dataclasses.dataclass(frozen=True)
class HeldSequence:
    """``health_list_held_sequences``: ``held`` runs of ``sequence_key`` wait (the oldest
    for ``oldest_held_s`` seconds) behind its first open run ``head_run_id`` in
    ``head_state`` (None: no open run holds them)."""

    sequence_key: str
    held: int
    oldest_held_s: float
    head_run_id: str | None
    head_state: str | None


@dataclasses.dataclass(frozen=True)
class ConnectionBudget:
    """``health_get_connections``: ``max_connections`` less ``reserved`` is what clients
    may open; ``in_use`` client connections now; ``live_workers`` of the schema and their
    ``worker_threads``."""

    max_connections: int
    reserved: int
    in_use: int
    live_workers: int
    worker_threads: int


@dataclasses.dataclass(frozen=True)
class DeployedFlow:
    """One row of ``cyclone_flows`` (``flow_get``; ``flow_list`` adds the current revision's
    facts): ``current_revision`` is what ``submit NAME`` runs; ``retired_at`` set: new
    submits by name are refused (``flows retire``). ``deployed_at`` ... ``digest`` describe
    the current revision; ``runs_last_day`` counts its runs (every revision, and submits
    from files) created in the last day, among the newest 100,000 of that day."""

    name: str
    current_revision: int
    retired_at: datetime | None
    retired_by: str | None
    updated_at: datetime
    deployed_at: datetime | None = None
    deployed_by: str | None = None
    git_commit: str | None = None
    kind: str | None = None
    rollback_of: int | None = None
    digest: str | None = None
    runs_last_day: int | None = None


@dataclasses.dataclass(frozen=True)
class Revision:
    """One row of ``cyclone_flow_revisions`` (``revision_get``, ``revision_list``).

    ``kind`` is ``deploy`` or ``rollback`` (then ``rollback_of`` is the revision whose
    source it restored); ``git_commit`` / ``git_path`` / ``git_dirty`` are None when the file
    was not in a git work tree; ``source_path`` is the path ``deploy`` read; ``digest`` the
    definition's content digest; ``current`` whether it is the flow's current revision;
    ``retired_at`` the flow's. ``source`` (the file's text, comments kept) and
    ``definition`` (the flow document) only from ``revision_get``; ``runs`` (runs submitted
    with it) only from ``revision_list``."""

    flow_name: str
    revision: int
    workflow_id: int
    kind: str
    rollback_of: int | None
    deployed_at: datetime
    deployed_by: str
    git_commit: str | None
    git_path: str | None
    git_dirty: bool | None
    source_path: str | None
    digest: str
    current: bool
    retired_at: datetime | None
    source: str | None = None
    definition: dict[str, Any] | None = None
    runs: int | None = None


class InsertedRevision(NamedTuple):
    """``revision_insert``: the new revision number and when it was stored."""

    revision: int
    deployed_at: datetime


class WaitingRun(NamedTuple):
    """``revision_list_waiting_runs``: a run that has not started yet, with its input."""

    id: str
    input: str
