"""Why a step waits: one function, :func:`explain`, that says for each step of a
run that is neither running nor finished what it waits for, from rows read in one
snapshot (:func:`read_snapshot`): its unfinished needs, the ``scheduled_at`` of a retry's
backoff or of a delayed run, the awaited signal and its deadline, the child run, the
``max_parallel`` bound of its fan-out, the earlier run that holds its sequence, its
concurrency key at its limit or its rate key out of claims for the window
(docs/flow-control.md), or the absence of a live worker serving its queue
(``cyclone_workers``). ``Client.explain`` and the run's view
(:mod:`cyclone_flow.run_view`: ``cyclone-flow status``, text and ``--json``, and the
dashboard) show the same answers. It imports no engine module and makes no transition.

:func:`explain` is pure: the same :class:`Snapshot` gives the same answers, so it is
tested on rows as well as through the API. There are no paused runs in cyclone-flow: a
run that ended (failed or cancelled) with unfinished steps says so
(:attr:`WaitReason.RUN_ENDED`).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from cyclone_flow.db import deps, rate_windows, runs, session, steps, workers
from cyclone_flow.db.conn import SessionLike
from cyclone_flow.db.rows import QueueInfo, RateWindow, Run, Step, WorkerRow
from cyclone_flow.durations import format_duration, format_span
from cyclone_flow.handlers import own_command, worker_import_path
from cyclone_flow.states import RunState, StepState

__all__ = [
    "GIVEN_BACK_RECENT_S",
    "Snapshot",
    "WaitReason",
    "Waiting",
    "explain",
    "rate_next_token",
    "read_snapshot",
    "read_snapshot_in",
]


class WaitReason(StrEnum):
    """Why a step that is neither running nor finished is not running (the ``reason`` of
    :class:`Waiting`; stable codes for ``status --json``)."""

    NEEDS = "needs"
    """Pending: some of its needs have not finished (``needs`` names them)."""
    SEQUENCE = "sequence"
    """Pending: its run is held behind an earlier run of its sequence (``holder_run_id``)."""
    MAX_PARALLEL = "max_parallel"
    """A fan-out item (or node) held back: ``max_parallel`` items are available or running."""
    BACKOFF = "backoff"
    """Available after a failed attempt, claimable at ``claimable_at`` (the retry delay)."""
    DELAYED = "delayed"
    """Available in a run submitted with ``run_at``/``delay``: claimable at ``claimable_at``."""
    CANNOT_IMPORT = "cannot_import"
    """Available, given back by a worker that cannot import (or may not run) its call
    (``text`` has that worker's account, ``since`` the first give-back): it waits for a
    worker that can, until its node's ``import_wait`` passes (docs/failures.md)."""
    NO_WORKER = "no_worker"
    """Claimable now, but no live worker serves its queue (``queue``)."""
    QUEUED = "queued"
    """Claimable now and a live worker serves its queue: it waits for a free worker slot."""
    CONCURRENCY = "concurrency"
    """Claimable now, but its concurrency ``key`` has ``limit`` steps running (``active``)."""
    RATE_LIMIT = "rate_limit"
    """Claimable now, but its rate ``key`` had its ``limit`` claims in the last window: the
    next claim can come at ``claimable_at`` (when enough of them leave the sliding window)."""
    SIGNAL = "signal"
    """A wait_signal node awaiting ``signal``, until ``deadline`` (None: no bound)."""
    CHILD_RUN = "child_run"
    """A child node waiting for ``child_run_id`` to end, until ``deadline``."""
    FAN_OUT = "fan_out"
    """A fan-out node waiting for its items (``items_done`` of ``items_total``)."""
    STARTING = "starting"
    """Pending with every need finished: its release is in progress (a transient state)."""
    RUN_ENDED = "run_ended"
    """Its run ended (failed or cancelled) before it ran; ``cyclone-flow retry`` resumes it."""


@dataclass(frozen=True)
class Waiting:
    """What one waiting step waits for: the ``reason`` code, a human ``text`` (one line),
    and the fields that apply: ``claimable_at`` (when it becomes claimable; for ``queued``
    and ``no_worker``, since when it is), ``needs`` (unfinished needs), ``signal`` and
    ``deadline``, ``child_run_id``, ``holder_run_id``, ``max_parallel`` and ``active``
    (items available or running; for ``concurrency``, the key's running steps),
    ``items_done``/``items_total``, ``queue``, ``served`` (whether a live worker serves its
    queue; None where it does not matter), ``key`` and ``limit`` (the concurrency or rate
    key at its limit), and ``since`` (``cannot_import``: the first give-back)."""

    node: str
    reason: WaitReason
    text: str
    queue: str
    claimable_at: datetime | None = None
    needs: tuple[str, ...] = ()
    signal: str | None = None
    deadline: datetime | None = None
    child_run_id: str | None = None
    holder_run_id: str | None = None
    max_parallel: int | None = None
    active: int | None = None
    items_done: int | None = None
    items_total: int | None = None
    served: bool | None = None
    key: str | None = None
    limit: int | None = None
    since: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``status --json``): the code, the text, ISO 8601 instants, and
        only the fields that apply."""
        out: dict[str, Any] = {"reason": str(self.reason), "text": self.text}
        out["claimable_at"] = self.claimable_at.isoformat() if self.claimable_at else None
        if self.needs:
            out["needs"] = list(self.needs)
        for name in (
            "signal",
            "child_run_id",
            "holder_run_id",
            "max_parallel",
            "active",
            "key",
            "limit",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.reason in (WaitReason.SIGNAL, WaitReason.CHILD_RUN):
            out["deadline"] = self.deadline.isoformat() if self.deadline else None
        if self.since is not None:
            out["since"] = self.since.isoformat()
        if self.items_total is not None:
            out["items"] = {"done": self.items_done or 0, "total": self.items_total}
        if self.served is not None:
            out["queue"] = self.queue
            out["served"] = self.served
        return out


@dataclass(frozen=True)
class Snapshot:
    """The rows :func:`explain` reads, all from one snapshot: the run and its steps
    (fan-out items only when read with ``items``), ``needs`` (node -> its dependencies),
    ``item_states`` (fan-out node -> item state -> count), the run's ``sequence_held``
    and ``holder_run_id``, every ``workers`` row, the database's ``now``, and for the
    limits of its available steps ``slots`` (concurrency key -> steps running) and
    ``windows`` (rate key -> its sliding log), ``import_paths`` for the worker hint, and
    the run's ``queue_info`` (its unique key, sequence and schedule)."""

    run: Run
    steps: Sequence[Step]
    needs: Mapping[str, Sequence[str]]
    item_states: Mapping[str, Mapping[str, int]]
    workers: Sequence[WorkerRow]
    now: datetime
    sequence_held: bool = False
    holder_run_id: str | None = None
    slots: Mapping[str, int] = field(default_factory=dict)
    windows: Mapping[str, RateWindow] = field(default_factory=dict)
    given_back: Mapping[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    """``(queue, call)`` -> ``(reason, scheduled_at)`` of a step of that call and queue (of
    any run) given back lately by a worker that cannot import it
    (:data:`GIVEN_BACK_RECENT_S`): why a never-claimed step of the same call waits."""
    import_paths: Mapping[str, str | None] = field(default_factory=dict)
    """Top-level handler package -> the ``--import-path`` a worker started in this
    process's folder needs for it (None: none), for the worker hint of a step no live
    worker serves (:func:`~cyclone_flow.handlers.worker_import_path`)."""
    queue_info: QueueInfo | None = None
    """The run's unique/sequence/schedule columns, read in the same snapshot."""
    _by_node: dict[str, Step] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_node.update((s.node, s) for s in self.steps)

    def served(self, queue: str) -> bool:
        """Whether a live worker claims steps of ``queue`` for this run."""
        return any(w.serves(queue, self.run.id) for w in self.workers)


GIVEN_BACK_RECENT_S = 60.0
"""Seconds a give-back of one step of a call explains why its other never-claimed steps
wait: twice a worker's longest skip window (30 s), after which it tries that call again."""


def read_snapshot(
    s: SessionLike, run_id: str, *, items: bool = False, now: datetime | None = None
) -> Snapshot | None:
    """Read what :func:`explain` needs for run ``run_id`` (a normalised UUID) in one
    read-only REPEATABLE READ transaction on ``s`` (``s.conn`` must be idle: the
    transaction begins here and the caller's block ends it); None for an unknown run.
    ``items``: also read each fan-out item step; ``now`` pins the clock (tests)."""
    with s.conn.transaction():
        session.session_set_read_snapshot(s)
        return read_snapshot_in(s, run_id, items=items, now=now)


def read_snapshot_in(
    s: SessionLike, run_id: str, *, items: bool = False, now: datetime | None = None
) -> Snapshot | None:
    """The reads of :func:`read_snapshot` in the transaction open on ``s``, which the
    caller began and made a read-only REPEATABLE READ one
    (``session.session_set_read_snapshot``) to read more in the same snapshot
    (:func:`cyclone_flow.run_view.read_view`); None for an unknown run."""
    run = runs.run_get(s, run_id=run_id)
    if run is None:
        return None
    info = runs.run_get_queue_info(s, run_id=run_id)
    held = info is not None and info.sequence_held
    rows = steps.step_list(s, run_id=run_id, items=items)
    available = [r for r in rows if r.state is StepState.AVAILABLE]
    concurrency = sorted({r.concurrency_key for r in available if r.concurrency_key})
    rated = sorted({r.rate_key for r in available if r.rate_key})
    live = workers.worker_list(s, now=now)
    unserved = {
        _package(r.call)
        for r in available
        if r.call and not any(w.serves(r.queue, run.id) for w in live)
    }
    # claimable steps never given back in a served queue: a live worker may be
    # skipping their call (it gave back another step of it lately)
    maybe_skipped = [
        r
        for r in available
        if r.call and r.import_wait_reason is None and any(w.serves(r.queue, run.id) for w in live)
    ]
    given_back = (
        steps.step_list_given_back_calls(
            s,
            queues=sorted({r.queue for r in maybe_skipped}),
            calls=sorted({r.call for r in maybe_skipped if r.call}),
            recent_s=GIVEN_BACK_RECENT_S,
        )
        if maybe_skipped
        else {}
    )
    return Snapshot(
        run=run,
        steps=rows,
        needs=deps.dep_list(s, run_id=run_id),
        item_states=steps.step_count_items(s, run_id=run_id),
        workers=live,
        now=session.pg_now(s, now=now),
        sequence_held=held,
        holder_run_id=runs.run_get_sequence_holder(s, run_id=run_id) if held else None,
        slots=(
            steps.step_count_running_by_concurrency_key(s, keys=concurrency) if concurrency else {}
        ),
        windows=(
            {w.rate_key: w for w in rate_windows.rate_window_list(s, keys=rated)} if rated else {}
        ),
        import_paths={p: worker_import_path(p, os.getcwd()) for p in sorted(unserved)},
        given_back=given_back,
        queue_info=info,
    )


def explain(snap: Snapshot) -> dict[str, Waiting]:
    """Why each step of the snapshot that is neither running nor finished waits: node ->
    :class:`Waiting` (running and finished steps are left out)."""
    out: dict[str, Waiting] = {}
    for step in snap.steps:
        if step.state is StepState.RUNNING or step.state.terminal:
            continue
        out[step.node] = _explain_step(snap, step)
    return out


def _when(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def _in(snap: Snapshot, at: datetime) -> str:
    seconds = max(0.0, (at - snap.now).total_seconds())
    return f"{_when(at)} (in {format_span(seconds)})"


def _no_worker_note(snap: Snapshot, step: Step) -> str:
    """``; no live worker serves queue 'q' (start one: ...)`` when none serves
    ``step``'s queue, else ""."""
    queue = step.queue
    if snap.served(queue):
        return ""
    return f"; no live worker serves queue {queue!r} (start one: {_worker_command(snap, step)})"


def _explain_step(snap: Snapshot, step: Step) -> Waiting:
    run = snap.run
    queue = step.queue
    if run.state is not RunState.RUNNING:
        return Waiting(
            step.node,
            WaitReason.RUN_ENDED,
            f"the run is {run.state}: this step will not run (cyclone-flow retry resumes it)",
            queue,
        )
    if step.state is StepState.WAITING:
        return _explain_waiting(snap, step)
    if step.state is StepState.PENDING:
        return _explain_pending(snap, step)
    # available: claimable at scheduled_at
    served = snap.served(queue)
    if step.import_wait_reason is not None:
        since = f" since {_when(step.import_wait_since)}" if step.import_wait_since else ""
        return Waiting(
            step.node,
            WaitReason.CANNOT_IMPORT,
            f"{step.import_wait_reason}; given back{since}, waits for a worker that can "
            "import it (discarded with import_error once its import_wait has passed)"
            + _no_worker_note(snap, step),
            queue,
            claimable_at=step.scheduled_at,
            since=step.import_wait_since,
            served=served,
        )
    if step.scheduled_at > snap.now:
        retry = step.attempt > 1 or bool(step.errors)
        reason = WaitReason.BACKOFF if retry else WaitReason.DELAYED
        what = (
            f"retry {step.attempt}/{step.max_attempts} in backoff"
            if retry
            else "delayed run: not before its start"
        )
        return Waiting(
            step.node,
            reason,
            f"{what}; claimable at {_in(snap, step.scheduled_at)}" + _no_worker_note(snap, step),
            queue,
            claimable_at=step.scheduled_at,
            served=served,
        )
    if not served:
        return Waiting(
            step.node,
            WaitReason.NO_WORKER,
            f"claimable since {_when(step.scheduled_at)}, but no live worker serves queue "
            f"{queue!r} (start one: {_worker_command(snap, step)})",
            queue,
            claimable_at=step.scheduled_at,
            served=False,
        )
    limited = _explain_limits(snap, step)
    if limited is not None:
        return limited
    sibling = snap.given_back.get((queue, step.call or ""))
    if sibling is not None:  # the live workers skip its call: one gave another step back
        given, at = sibling
        return Waiting(
            step.node,
            WaitReason.CANNOT_IMPORT,
            f"{given} (another step of {step.call} was given back, claimable again at "
            f"{_when(at)}); claimable since {_when(step.scheduled_at)}, waits for a worker "
            "that can import it",
            queue,
            claimable_at=step.scheduled_at,
            served=True,
        )
    return Waiting(
        step.node,
        WaitReason.QUEUED,
        f"claimable since {_when(step.scheduled_at)}; waits for a free worker of queue {queue!r}",
        queue,
        claimable_at=step.scheduled_at,
        served=True,
    )


def _explain_limits(snap: Snapshot, step: Step) -> Waiting | None:
    """A claimable step held back by its limits: its concurrency key at its limit, or its
    rate key out of claims in the last window; None when neither binds."""
    key, limit = step.concurrency_key, step.concurrency_limit
    if key is not None and limit is not None:
        running = snap.slots.get(key, 0)
        if running >= limit:
            return Waiting(
                step.node,
                WaitReason.CONCURRENCY,
                f"waiting: concurrency key {key} at limit {limit} ({running} running); "
                "claimable when one of them ends",
                step.queue,
                claimable_at=step.scheduled_at,
                active=running,
                served=True,
                key=key,
                limit=limit,
            )
    key, limit, per = step.rate_key, step.rate_limit, step.rate_per_s
    window = snap.windows.get(key) if key is not None else None
    if window is not None and limit is not None and per is not None:
        taken, at = rate_next_token(window, limit, per, snap.now)
        if at is not None:
            left = (at - snap.now).total_seconds()
            return Waiting(
                step.node,
                WaitReason.RATE_LIMIT,
                f"rate limit {key}: next token in {format_span(left)} ({taken} of {limit} "
                f"claims per {format_duration(per)} taken)",
                step.queue,
                claimable_at=at,
                served=True,
                key=key,
                limit=limit,
            )
    return None


def rate_next_token(
    window: RateWindow, limit: int, per_s: float, now: datetime
) -> tuple[int, datetime | None]:
    """The rule of the limited claim (``step_claim_limited_if_available``, migration 0013):
    the claims of ``window`` that count at ``now`` for a window of ``per_s`` seconds (the
    buckets that end after ``now - per``), and when the next claim is admitted: None when
    one is now (fewer than ``limit`` count), else the instant enough of the oldest buckets
    have left the window (a bucket ending at ``e`` stops counting at ``e + per``)."""
    per = timedelta(seconds=per_s)
    live = sorted(
        (end, n)
        for end, n in zip(window.bucket_ends, window.bucket_claims, strict=True)
        if end > now - per
    )
    taken = sum(n for _, n in live)
    if taken < limit:
        return taken, None
    need, freed = taken - limit + 1, 0
    for end, n in live:
        freed += n
        if freed >= need:
            return taken, end + per
    return taken, None  # unreachable: need <= taken


def _explain_pending(snap: Snapshot, step: Step) -> Waiting:
    queue = step.queue
    if step.parent_node is not None:  # a fan-out item beyond max_parallel
        parent = snap._by_node.get(step.parent_node)
        bound = parent.max_parallel if parent is not None else None
        active = _active_items(snap, step.parent_node)
        return Waiting(
            step.node,
            WaitReason.MAX_PARALLEL,
            f"{step.parent_node} runs at most {bound} items at once ({active} available or "
            "running); this item starts when one of them ends",
            queue,
            max_parallel=bound,
            active=active,
        )
    if snap.sequence_held and not snap.needs.get(step.node):
        holder = snap.holder_run_id
        text = (
            f"the run is held in its sequence until run {holder} completes or is cancelled"
            if holder
            else "the run is held in its sequence; its release is due"
        )
        return Waiting(step.node, WaitReason.SEQUENCE, text, queue, holder_run_id=holder)
    unfinished = tuple(
        need
        for need in snap.needs.get(step.node, ())
        if (dep := snap._by_node.get(need)) is None or not dep.state.terminal
    )
    if unfinished:
        states = ", ".join(f"{n} ({_state_of(snap, n)})" for n in unfinished)
        return Waiting(
            step.node,
            WaitReason.NEEDS,
            f"waits for {states}",
            queue,
            needs=unfinished,
        )
    if step.scheduled_at > snap.now:  # a delayed run's node that is not an action
        return Waiting(
            step.node,
            WaitReason.DELAYED,
            f"delayed run: starts at {_in(snap, step.scheduled_at)}",
            queue,
            claimable_at=step.scheduled_at,
        )
    return Waiting(
        step.node, WaitReason.STARTING, "its needs are done: it is being released", queue
    )


def _package(call: str) -> str:
    """The top-level package of handler ``call`` (``shop`` of ``shop.handlers:charge``)."""
    return call.partition(":")[0].split(".")[0]


def _worker_command(snap: Snapshot, step: Step) -> str:
    """The command that starts a worker for ``step``, pasted in the folder this process
    runs in: this script (by its path when ``cyclone-flow`` on PATH is another one or
    none, :func:`~cyclone_flow.handlers.own_command`), its queue, the top-level package
    of its handler as the allow-list a worker needs (``PACKAGE`` when it has none) and,
    when that folder does not hold the package and it is not installed, ``--import-path``
    the folder below that does (``snap.import_paths``)."""
    package = _package(step.call) if step.call else "PACKAGE"
    command = f"{own_command()} worker --queue {step.queue} --allow-module {package}"
    folder = snap.import_paths.get(package)
    return f"{command} --import-path {shlex.quote(folder)}" if folder else command


def _explain_waiting(snap: Snapshot, step: Step) -> Waiting:
    queue = step.queue
    until = f" until {_when(step.wait_until)}" if step.wait_until else " (no deadline)"
    if step.type == "wait_signal":
        return Waiting(
            step.node,
            WaitReason.SIGNAL,
            f"awaits signal {step.signal!r}{until} "
            f"(cyclone-flow signal {snap.run.id} {step.signal})",
            queue,
            signal=step.signal,
            deadline=step.wait_until,
        )
    if step.type == "child":
        return Waiting(
            step.node,
            WaitReason.CHILD_RUN,
            f"waits for child run {step.child_run_id} to end{until}",
            queue,
            child_run_id=step.child_run_id,
            deadline=step.wait_until,
        )
    # a fan-out node: its items decide
    counts = snap.item_states.get(step.node, {})
    done, total = step.items_done or 0, step.items_total
    progress = f"{done}/{total} items done"
    available = counts.get(str(StepState.AVAILABLE), 0)
    pending = counts.get(str(StepState.PENDING), 0)
    active = _active_items(snap, step.node)
    fields: dict[str, Any] = {"items_done": done, "items_total": total, "active": active}
    if available and not snap.served(queue):
        return Waiting(
            step.node,
            WaitReason.NO_WORKER,
            f"{progress}; {available} claimable but no live worker serves queue {queue!r}",
            queue,
            served=False,
            **fields,
        )
    if pending and step.max_parallel is not None and active >= step.max_parallel:
        return Waiting(
            step.node,
            WaitReason.MAX_PARALLEL,
            f"{progress}; max_parallel {step.max_parallel} reached ({active} available or "
            f"running, {pending} held back)",
            queue,
            max_parallel=step.max_parallel,
            **fields,
        )
    return Waiting(
        step.node, WaitReason.FAN_OUT, f"waits for its items: {progress}", queue, **fields
    )


def _active_items(snap: Snapshot, node: str) -> int:
    counts = snap.item_states.get(node, {})
    return counts.get(str(StepState.AVAILABLE), 0) + counts.get(str(StepState.RUNNING), 0)


def _state_of(snap: Snapshot, node: str) -> str:
    dep = snap._by_node.get(node)
    return str(dep.state) if dep is not None else "not started"
