"""Deploying flow files as revisions: what ``Client.deploy``, ``diff``, ``rollback``,
``retire``, ``flow_history``, ``get_revision``, ``load_revision``, ``diff_revisions`` and
the submission of a deployed flow by name delegate to (docs/deploy.md).

A revision is a number per flow name that only grows, with the file's source text as it
was (comments kept), the compiled definition (the content-addressed definition row), when,
by whom and the git commit of the file. ``cyclone_flows`` says which revision is current.
Every change (deploy, rollback, retire) is one transaction under ``flow_lock_deploys``
that plans by reads, then writes; a diff or dry run makes the same plan in a read-only
snapshot and writes nothing. A flow's schedules are planned and synced by the
:class:`ScheduleSync` the client gives (``Schedules`` of
:mod:`cyclone_flow.schedule_admin`, a module of the same layer, so passed in rather than
imported). The comparison of two versions is
:mod:`cyclone_flow.flowfile.compare`'s, the git facts :mod:`cyclone_flow.gitinfo`'s.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from cyclone_flow.db import flow_revisions as revisions
from cyclone_flow.db import schedules as schedules_db
from cyclone_flow.db import session
from cyclone_flow.db.conn import Conn, Database, Session
from cyclone_flow.db.rows import DeployedFlow, Revision
from cyclone_flow.engine.submit import store_definition
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import (
    CompatibilityError,
    DeployLintError,
    FlowError,
    FlowNotDeployedError,
    FlowRetiredError,
    InputValidationError,
    PayloadTooLargeError,
    Problem,
    RevisionNotFoundError,
    SubmitOptionError,
)
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.flowfile.compare import FlowChange, compare_documents, source_diff
from cyclone_flow.flowfile.lint import find_flow_files
from cyclone_flow.flowfile.load import analyse_text, load_flow_text
from cyclone_flow.flowfile.model import JSON, Flow
from cyclone_flow.flowfile.read import read_text
from cyclone_flow.gitinfo import GitInfo, git_info
from cyclone_flow.inserter import Inserter, RunId
from cyclone_flow.notify import Wakeups
from cyclone_flow.options import RunOptions
from cyclone_flow.schedules import ScheduleSpec, SyncResult, flow_schedules
from cyclone_flow.text import storable

__all__ = [
    "CompatProblem",
    "DeployResult",
    "Deployments",
    "FlowPlan",
    "RetireResult",
    "RevisionDiff",
    "ScheduleSync",
    "is_flow_reference",
    "is_revision",
    "parse_flow_reference",
]

Status = Literal["added", "changed", "unchanged", "removed"]

FLOW_REFERENCE = re.compile(r"[a-z][a-z0-9_-]*(@[0-9]+)?")
"""A deployed flow named where a flow file could be (``submit``): ``NAME`` or ``NAME@REV``."""

FLOW_NAME_MAX = 100
"""The longest flow name (the flow schema's ``maxLength``)."""

MAX_REVISION = 2**31 - 1
"""The highest revision number (an int4 column)."""


def is_flow_reference(value: str) -> bool:
    """Whether ``value`` names a deployed flow (``NAME`` or ``NAME@REV``, see
    :data:`FLOW_REFERENCE`) rather than a flow file: it has that form and is not an
    existing file (a folder of that name does not count)."""
    return FLOW_REFERENCE.fullmatch(value) is not None and not os.path.isfile(value)


def is_revision(value: object) -> bool:
    """Whether ``value`` is a revision number: an int (not a bool) from 1 to
    :data:`MAX_REVISION`."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_REVISION


def parse_flow_reference(value: str, revision: int | None) -> tuple[str, int | None]:
    """``(name, revision)`` of ``NAME`` / ``NAME@REV``; ``revision`` is the one given
    separately. Raises SubmitOptionError when ``value`` is not of that form (a flow name
    of at most :data:`FLOW_NAME_MAX` characters), a revision is not an integer from 1 to
    :data:`MAX_REVISION`, or both give one and they differ."""
    if not isinstance(value, str) or FLOW_REFERENCE.fullmatch(value) is None:
        raise SubmitOptionError(
            "flow", value, "not a deployed flow: NAME or NAME@REV (NAME a flow's name)"
        )
    name, _, rev = value.partition("@")
    if len(name) > FLOW_NAME_MAX:
        raise SubmitOptionError(
            "flow", value, f"a flow name has at most {FLOW_NAME_MAX} characters"
        )
    at = None
    if rev:
        at = int(rev) if len(rev) <= 10 else MAX_REVISION + 1  # digits only
        if not is_revision(at):
            raise SubmitOptionError(
                "flow", value, f"the revision must be an integer from 1 to {MAX_REVISION}"
            )
    if revision is None:
        return name, at
    if not is_revision(revision):
        raise SubmitOptionError(
            "revision", revision, f"must be an integer from 1 to {MAX_REVISION}"
        )
    if at is not None and at != revision:
        raise SubmitOptionError("revision", revision, f"differs from the revision in {value!r}")
    return name, revision


@dataclass(frozen=True, slots=True)
class CompatProblem:
    """A stored input the new ``input_schema`` refuses: of the schedule ``name``
    (``kind`` ``schedule``) or of the waiting run ``name`` (``kind`` ``run``: its id);
    ``message`` is the validation error."""

    kind: Literal["schedule", "run"]
    name: str
    message: str

    def to_json(self) -> dict[str, JSON]:
        """``{"kind", "name", "message"}``."""
        return {"kind": self.kind, "name": self.name, "message": self.message}


@dataclass(frozen=True)
class FlowPlan:
    """One flow of a deploy, diff or rollback.

    ``status``: ``added`` (never deployed), ``changed``, ``unchanged`` (same definition
    and same source text, not retired: no revision written) or ``removed`` (only with
    prune: retired). ``previous`` is the current revision before the call (None: never
    deployed); ``revision`` the one written (a diff or dry run: the one it would write),
    ``previous`` when unchanged, None when removed. ``change`` compares the previous
    definition with the new one, ``source_diff`` their sources (unified diff).
    ``schedules`` are the schedule names added / updated / removed, planned by reads
    before anything is written (a diff and a deploy agree): ``added`` a file entry with no
    stored row, ``updated`` a row whose cron, timezone or input differ or that pointed at
    another revision than ``previous`` (out of sync; manual schedules too), ``removed`` a
    file schedule the file no longer declares; a row that only follows the flow to its new
    revision is not listed. An ``unchanged`` flow whose schedules are not empty here gets
    them synced back to its current revision (no new revision);
    ``problems`` the stored inputs the new ``input_schema`` refuses; ``was_retired`` says
    the flow was retired (a deploy makes it active again); ``git`` where the file stands
    in git (None: not in a work tree). ``kind`` is ``rollback`` for a rollback, then
    ``rollback_of`` is the revision restored.
    """

    name: str
    path: str | None
    status: Status
    previous: int | None
    revision: int | None
    change: FlowChange
    source_diff: str
    schedules: SyncResult
    problems: tuple[CompatProblem, ...]
    was_retired: bool
    git: GitInfo | None
    kind: Literal["deploy", "rollback"] = "deploy"
    rollback_of: int | None = None

    def to_json(self) -> dict[str, JSON]:
        """``{"name", "path", "status", "previous", "revision", "kind", "rollback_of",
        "was_retired", "git": {"commit", "path", "dirty"} | null, "change":
        FlowChange.to_json(), "source_diff", "schedules": {"added", "updated",
        "removed"}, "problems": [CompatProblem.to_json()]}``."""
        git: JSON = (
            None
            if self.git is None
            else {"commit": self.git.commit, "path": self.git.path, "dirty": self.git.dirty}
        )
        return {
            "name": self.name,
            "path": self.path,
            "status": self.status,
            "previous": self.previous,
            "revision": self.revision,
            "kind": self.kind,
            "rollback_of": self.rollback_of,
            "was_retired": self.was_retired,
            "git": git,
            "change": self.change.to_json(),
            "source_diff": self.source_diff,
            "schedules": {
                "added": list(self.schedules.added),
                "updated": list(self.schedules.updated),
                "removed": list(self.schedules.removed),
            },
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass(frozen=True)
class DeployResult:
    """What a deploy did, or a diff / dry run would do: one :class:`FlowPlan` per flow
    (the files' flows in file order, then the pruned ones by name); ``applied`` False for
    a diff or dry run; ``by`` who deployed. A diff or dry run only reads, in one read-only
    snapshot: no lock, nothing written."""

    flows: tuple[FlowPlan, ...]
    applied: bool
    by: str

    @property
    def changed(self) -> bool:
        """Whether any flow is not ``unchanged`` or any flow's schedule plan is not empty
        (an unchanged flow whose schedules drifted, restored by a deploy): ``diff``'s exit
        code 1."""
        return any(f.status != "unchanged" or _any_schedule(f.schedules) for f in self.flows)

    @property
    def problems(self) -> tuple[CompatProblem, ...]:
        """Every flow's compatibility problems, flow by flow."""
        return tuple(p for f in self.flows for p in f.problems)

    def to_json(self) -> dict[str, JSON]:
        """``{"applied", "by", "changed", "flows": [FlowPlan.to_json()]}``."""
        return {
            "applied": self.applied,
            "by": self.by,
            "changed": self.changed,
            "flows": [f.to_json() for f in self.flows],
        }


@dataclass(frozen=True)
class RevisionDiff:
    """Two revisions of the flow ``name`` compared: ``change`` (definitions, node by node)
    and ``source_diff`` (the sources, unified diff labelled ``NAME@OLD`` / ``NAME@NEW``)."""

    name: str
    old: int
    new: int
    change: FlowChange
    source_diff: str

    def to_json(self) -> dict[str, JSON]:
        """``{"name", "old", "new", "change": FlowChange.to_json(), "source_diff"}``."""
        return {
            "name": self.name,
            "old": self.old,
            "new": self.new,
            "change": self.change.to_json(),
            "source_diff": self.source_diff,
        }


@dataclass(frozen=True)
class RetireResult:
    """A retire: ``retired`` False when the flow was retired already; ``paused`` the
    schedules it paused."""

    name: str
    retired: bool
    paused: tuple[str, ...]


class ScheduleSync(Protocol):
    """The schedule edits a deploy makes (``Schedules`` of
    :mod:`cyclone_flow.schedule_admin`)."""

    def register_in(
        self,
        conn: Conn,
        flow: Flow,
        entries: Sequence[ScheduleSpec],
        *,
        workflow_id: int,
        revision: int | None,
        current: datetime,
        check_inputs: bool = True,
    ) -> SyncResult:
        """Sync the file schedules ``entries`` of ``flow`` inside the caller's transaction
        on ``conn``, as ``schedule sync`` does, pointing them at ``workflow_id`` and
        deployed ``revision``; ``current`` is the clock of their next ticks;
        ``check_inputs`` False stores an input the flow's schema refuses as given (a
        forced deploy). Raises InputValidationError (an entry's input),
        SubmitOptionError (a name taken by a manual schedule, a bad cron)."""
        ...

    def plan_in(
        self, s: Session, flow: Flow, entries: Sequence[ScheduleSpec], *, revision: int | None
    ) -> SyncResult:
        """What :meth:`register_in` of ``entries`` and repointing the flow's schedules
        from its current ``revision`` to a new one would change, by reads only."""
        ...


@dataclass(frozen=True)
class _Source:
    """One flow file of a deploy: its path, text, loaded flow and git facts."""

    path: str
    text: str
    flow: Flow
    git: GitInfo | None


@dataclass(frozen=True)
class _Planned:
    """One flow of a deploy or rollback planned: its :class:`FlowPlan`, the flow that
    becomes current (None: removed), the current revision before (None: never deployed),
    the file deployed or the revision rolled back to."""

    plan: FlowPlan
    flow: Flow | None
    before: Revision | None
    source: _Source | None = None
    target: Revision | None = None


_NO_SCHEDULES = SyncResult(added=[], updated=[], removed=[])

WAITING_RUNS_CHECKED = 1000
"""The most waiting runs of a flow whose inputs a deploy checks against the new schema
(the oldest; past it the client's logger warns that the rest went unchecked)."""

FLOWS_CACHED = 256
"""The most stored definitions (by id) a client keeps built for submits by name."""


def default_by() -> str:
    """Who deploys when ``by`` is not given: the OS user (``unknown`` when there is none)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "unknown"


class Deployments:
    """The deployed flows of ``db``'s schema; ``inserter`` checks inputs as a submission
    would, ``schedules`` plans a flow's schedules and syncs them in a deploy's
    transaction."""

    def __init__(self, db: Database, inserter: Inserter, schedules: ScheduleSync) -> None:
        self._db = db
        self._inserter = inserter
        self._schedules = schedules
        self._flows: dict[int, Flow] = {}  # stored definitions built, by id (immutable)

    # -- deploy, diff ----------------------------------------------------------------------

    def deploy(
        self,
        paths: list[str],
        *,
        by: str | None = None,
        prune: bool = False,
        force: bool = False,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> DeployResult:
        """See :meth:`cyclone_flow.Client.deploy`."""
        return self._deploy(paths, by, prune, force, dry_run, now, tolerate=False)

    def diff(
        self, paths: list[str], *, prune: bool = False, now: datetime | None = None
    ) -> DeployResult:
        """See :meth:`cyclone_flow.Client.diff`."""
        return self._deploy(paths, None, prune, False, True, now, tolerate=True)

    def _deploy(
        self,
        paths: list[str],
        by: str | None,
        prune: bool,
        force: bool,
        dry_run: bool,
        now: datetime | None,
        *,
        tolerate: bool,
    ) -> DeployResult:
        sources = _read_sources(paths)
        who = by if by is not None else default_by()
        if dry_run:
            with self._read() as s:
                planned = self._plan_deploy(s, sources, prune)
            result = DeployResult(flows=tuple(p.plan for p in planned), applied=False, by=who)
            if result.problems and not force and not tolerate:
                raise CompatibilityError(result.problems, result)
            return result
        with self._db.transaction() as conn:
            s = Session(conn, self._db.q)
            revisions.flow_lock_deploys(s)
            current = session.pg_now(s, now=now)
            planned = self._plan_deploy(s, sources, prune)
            result = DeployResult(flows=tuple(p.plan for p in planned), applied=True, by=who)
            if result.problems and not force:
                raise CompatibilityError(result.problems, _unapplied(result))
            for one in planned:
                self._apply(conn, one, who, current)
        return result

    @contextmanager
    def _read(self) -> Iterator[Session]:
        """A session inside one read-only REPEATABLE READ transaction (a plan's reads)."""
        with self._db.session() as s, s.conn.transaction():
            session.session_set_read_snapshot(s)
            yield s

    def _plan_deploy(self, s: Session, sources: Sequence[_Source], prune: bool) -> list[_Planned]:
        """The plan of a deploy of ``sources`` (with ``prune``, the retirement of the other
        active flows), by reads only on ``s``."""
        planned = [self._plan_source(s, src) for src in sources]
        if prune:
            keep = {src.flow.name for src in sources}
            planned += self._plan_prune(s, keep)
        return planned

    def _plan_source(self, s: Session, src: _Source) -> _Planned:
        """The plan of deploying ``src``'s flow: see :class:`FlowPlan`."""
        flow = src.flow
        deployed = revisions.flow_get(s, name=flow.name)
        before = (
            None
            if deployed is None
            else revisions.revision_get(s, flow_name=flow.name, revision=None)
        )
        previous = None if before is None else before.revision
        diff = source_diff(
            None if before is None else before.source,
            src.text,
            f"{flow.name}@{previous}" if previous is not None else "/dev/null",
            src.path,
        )
        unchanged = (
            before is not None and before.digest == flow.digest and before.source == src.text
        )
        return self._plan_flow(
            s,
            flow,
            before,
            unchanged,
            FlowPlan(
                name=flow.name,
                path=src.path,
                status="added" if before is None else "changed",
                previous=previous,
                revision=None,
                change=compare_documents(
                    None if before is None else before.definition, flow.document
                ),
                source_diff=diff,
                schedules=_NO_SCHEDULES,
                problems=(),
                was_retired=deployed is not None and deployed.retired_at is not None,
                git=src.git,
            ),
            source=src,
        )

    def _plan_flow(
        self,
        s: Session,
        flow: Flow,
        before: Revision | None,
        same: bool,
        plan: FlowPlan,
        *,
        source: _Source | None = None,
        target: Revision | None = None,
    ) -> _Planned:
        """Complete ``plan`` (a new current revision ``flow`` of ``plan.name``; ``before``
        the current one, None: never deployed; ``same`` when their definition and source
        are equal): ``unchanged`` when ``same`` and not retired (no revision; its problems
        are none, its schedules synced back when they drifted), else the next revision
        (``before``'s + 1: the current revision is always the highest), the compatibility
        problems; the schedule plan either way."""
        previous = None if before is None else before.revision
        schedules = self._schedules.plan_in(s, flow, flow_schedules(flow), revision=previous)
        if same and not plan.was_retired:
            assert before is not None
            plan = dataclasses.replace(
                plan, status="unchanged", revision=previous, schedules=schedules
            )
        else:
            plan = dataclasses.replace(
                plan,
                revision=1 if previous is None else previous + 1,
                schedules=schedules,
                problems=self._check(s, flow),
            )
        return _Planned(plan=plan, flow=flow, before=before, source=source, target=target)

    def _plan_prune(self, s: Session, keep: set[str]) -> list[_Planned]:
        """The retirement of the deployed, active flows not in ``keep``: status
        ``removed``, their file schedules removed (the others paused), by name."""
        planned = []
        for deployed in revisions.flow_list(s):
            if deployed.name in keep or deployed.retired_at is not None:
                continue
            before = revisions.revision_get(s, flow_name=deployed.name, revision=None)
            assert before is not None  # a deployed flow has its current revision
            rows = schedules_db.schedule_list_for_flow(s, flow_name=deployed.name)
            plan = FlowPlan(
                name=deployed.name,
                path=None,
                status="removed",
                previous=before.revision,
                revision=None,
                change=compare_documents(before.definition, None),
                source_diff=source_diff(
                    before.source, None, f"{deployed.name}@{before.revision}", "/dev/null"
                ),
                schedules=SyncResult(
                    added=[], updated=[], removed=[r.name for r in rows if r.source == "flow"]
                ),
                problems=(),
                was_retired=False,
                git=_stored_git(before),
            )
            planned.append(_Planned(plan=plan, flow=None, before=before))
        return planned

    def _apply(self, conn: Conn, one: _Planned, by: str, current: datetime) -> None:
        """Write ``one``'s plan in the transaction on ``conn`` (under flow_lock_deploys,
        the plan read in it): retire a removed flow; sync an unchanged flow's schedules
        when they drifted; else store the next revision, make it current, sync."""
        s = Session(conn, self._db.q)
        plan = one.plan
        if one.flow is None:  # removed
            revisions.flow_retire_if_active(s, name=plan.name, by=by)
            schedules_db.schedule_delete_flow_stale(s, flow_name=plan.name, keep=[])
            schedules_db.schedule_pause_for_flow(s, flow_name=plan.name)
            return
        if plan.status == "unchanged":
            assert one.before is not None
            if _any_schedule(plan.schedules):
                # the inputs are the ones the current revision was deployed with
                self._sync_to(conn, one.flow, one.before.workflow_id, plan, current, False)
            return
        check = not any(p.kind == "schedule" for p in plan.problems)
        if one.target is not None:  # rollback
            target = one.target
            workflow_id = target.workflow_id
            inserted = revisions.revision_insert(
                s,
                flow_name=plan.name,
                workflow_id=workflow_id,
                source=target.source or "",
                source_path=target.source_path,
                kind="rollback",
                rollback_of=target.revision,
                deployed_by=by,
                git_commit=target.git_commit,
                git_path=target.git_path,
                git_dirty=target.git_dirty,
            )
        else:
            assert one.source is not None
            src = one.source
            workflow_id = store_definition(Tx(conn, self._db.q), one.flow)
            inserted = revisions.revision_insert(
                s,
                flow_name=plan.name,
                workflow_id=workflow_id,
                source=src.text,
                source_path=src.path,
                kind="deploy",
                rollback_of=None,
                deployed_by=by,
                git_commit=None if src.git is None else src.git.commit,
                git_path=None if src.git is None else src.git.path,
                git_dirty=None if src.git is None else src.git.dirty,
            )
        assert inserted.revision == plan.revision  # planned under the same lock
        revisions.flow_set_current(s, name=plan.name, revision=inserted.revision)
        self._sync_to(conn, one.flow, workflow_id, plan, current, check)

    def _sync_to(
        self,
        conn: Conn,
        flow: Flow,
        workflow_id: int,
        plan: FlowPlan,
        current: datetime,
        check_inputs: bool,
    ) -> None:
        """Sync the file schedules of ``flow`` to ``plan.revision`` (definition
        ``workflow_id``) and point the flow's other schedules at it."""
        assert plan.revision is not None
        self._schedules.register_in(
            conn,
            flow,
            flow_schedules(flow),
            workflow_id=workflow_id,
            revision=plan.revision,
            current=current,
            check_inputs=check_inputs,
        )
        schedules_db.schedule_set_revision_for_flow(
            Session(conn, self._db.q),
            flow_name=flow.name,
            workflow_id=workflow_id,
            revision=plan.revision,
        )

    def _check(self, s: Session, flow: Flow) -> tuple[CompatProblem, ...]:
        """The stored inputs that would use ``flow`` and that its ``input_schema``
        refuses: its file schedules' inputs, the flow's schedules added by hand, and the
        inputs of its runs waiting to start (never started; the oldest
        :data:`WAITING_RUNS_CHECKED`, a warning logged when there may be more)."""
        problems: list[CompatProblem] = []
        for entry in flow_schedules(flow):
            message = self._refused(flow, entry.input)
            if message is not None:
                problems.append(CompatProblem("schedule", entry.name, message))
        for row in schedules_db.schedule_list_for_flow(s, flow_name=flow.name):
            if row.source == "flow":
                continue  # replaced by the file's schedules, or removed
            message = self._refused(flow, row.input)
            if message is not None:
                problems.append(CompatProblem("schedule", row.name, message))
        waiting = revisions.revision_list_waiting_runs(
            s, flow_name=flow.name, limit=WAITING_RUNS_CHECKED
        )
        if len(waiting) >= WAITING_RUNS_CHECKED:
            self._inserter.config.logger.warning(
                "deploy of %s: only the %d oldest runs waiting to start were checked "
                "against the new input_schema",
                flow.name,
                WAITING_RUNS_CHECKED,
            )
        for run in waiting:
            message = self._refused(flow, json.loads(run.input))
            if message is not None:
                problems.append(CompatProblem("run", str(run.id), message))
        return tuple(problems)

    def _refused(self, flow: Flow, value: Any) -> str | None:
        """Why ``flow``'s input schema (or the input size limit) refuses ``value``; None
        when it accepts it."""
        try:
            self._inserter.prepare_input(flow, value)
        except (InputValidationError, PayloadTooLargeError) as exc:
            return str(exc)
        return None

    # -- reads -----------------------------------------------------------------------------

    def list_flows(self) -> list[DeployedFlow]:
        """See :meth:`cyclone_flow.Client.list_deployed_flows`."""
        with self._db.session() as s:
            return revisions.flow_list(s)

    def get_flow(self, name: str) -> DeployedFlow | None:
        """See :meth:`cyclone_flow.Client.get_deployed_flow`."""
        if not storable(name):
            return None
        with self._db.session() as s:
            return revisions.flow_get(s, name=name)

    def history(self, name: str) -> list[Revision]:
        """See :meth:`cyclone_flow.Client.flow_history`."""
        if not storable(name):
            raise FlowNotDeployedError(name)
        with self._db.session() as s:
            found = revisions.revision_list(s, flow_name=name)
        if not found:
            raise FlowNotDeployedError(name)
        return found

    def get_revision(self, name: str, revision: int | None = None) -> Revision:
        """See :meth:`cyclone_flow.Client.get_revision`."""
        with self._db.session() as s:
            return _revision(s, name, revision)

    def load_revision(self, name: str, revision: int | None = None) -> Flow:
        """See :meth:`cyclone_flow.Client.load_revision`."""
        found = self.get_revision(name, revision)
        return self._built(found)

    def diff_revisions(self, name: str, old: int, new: int | None = None) -> RevisionDiff:
        """See :meth:`cyclone_flow.Client.diff_revisions`."""
        with self._db.session() as s:
            a = _revision(s, name, old)
            b = _revision(s, name, new)
        return RevisionDiff(
            name=name,
            old=a.revision,
            new=b.revision,
            change=compare_documents(a.definition, b.definition),
            source_diff=source_diff(
                a.source, b.source, f"{name}@{a.revision}", f"{name}@{b.revision}"
            ),
        )

    # -- rollback, retire ------------------------------------------------------------------

    def rollback(
        self,
        name: str,
        to: int,
        *,
        by: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> FlowPlan:
        """See :meth:`cyclone_flow.Client.rollback`."""
        who = by if by is not None else default_by()
        if dry_run:
            with self._read() as s:
                plan = self._plan_rollback(s, name, to).plan
            if plan.problems and not force:
                raise CompatibilityError(plan.problems, plan)
            return plan
        with self._db.transaction() as conn:
            s = Session(conn, self._db.q)
            revisions.flow_lock_deploys(s)
            current = session.pg_now(s, now=now)
            planned = self._plan_rollback(s, name, to)
            if planned.plan.problems and not force:
                raise CompatibilityError(planned.plan.problems, planned.plan)
            self._apply(conn, planned, who, current)
        return planned.plan

    def _plan_rollback(self, s: Session, name: str, to: int) -> _Planned:
        """The plan of a rollback of ``name`` to revision ``to``, by reads only on ``s``.
        Raises FlowNotDeployedError, RevisionNotFoundError."""
        target = _revision(s, name, to)
        before = _revision(s, name, None)
        assert target.definition is not None and before.definition is not None
        same = before.digest == target.digest and before.source == target.source
        plan = FlowPlan(
            name=name,
            path=None,
            status="changed",
            previous=before.revision,
            revision=None,
            change=compare_documents(before.definition, target.definition),
            source_diff=source_diff(
                before.source,
                target.source,
                f"{name}@{before.revision}",
                f"{name}@{target.revision}",
            ),
            schedules=_NO_SCHEDULES,
            problems=(),
            was_retired=before.retired_at is not None,
            git=_stored_git(target),
            kind="rollback",
            rollback_of=target.revision,
        )
        return self._plan_flow(s, self._built(target), before, same, plan, target=target)

    def retire(self, name: str, *, by: str | None = None) -> RetireResult:
        """See :meth:`cyclone_flow.Client.retire`."""
        if not storable(name):
            raise FlowNotDeployedError(name)
        who = by if by is not None else default_by()
        with self._db.transaction() as conn:
            s = Session(conn, self._db.q)
            revisions.flow_lock_deploys(s)
            retired = revisions.flow_retire_if_active(s, name=name, by=who)
            if not retired and revisions.flow_get(s, name=name) is None:
                raise FlowNotDeployedError(name)
            paused = schedules_db.schedule_pause_for_flow(s, flow_name=name)
        return RetireResult(name=name, retired=retired, paused=tuple(paused))

    # -- submit by name --------------------------------------------------------------------

    def insert_by_name(
        self,
        conn: Conn,
        ref: str,
        run_input: JSON,
        revision: int | None,
        options: RunOptions,
        before_commit: Callable[[Conn, RunId], None] | None = None,
    ) -> tuple[RunId, Wakeups]:
        """Insert a run of the deployed flow ``ref`` (``NAME`` / ``NAME@REV``; or
        ``revision``) with ``options`` in a transaction of its own on the idle ``conn``,
        committed (see :meth:`insert_by_name_in`). ``before_commit(conn, run_id)`` runs in
        that transaction. Returns the run id and the wakeups to publish."""
        with conn.transaction():
            run_id, wakeups = self.insert_by_name_in(conn, ref, run_input, revision, options)
            if before_commit is not None:
                before_commit(conn, run_id)
        return run_id, wakeups

    def insert_by_name_in(
        self,
        conn: Conn,
        ref: str,
        run_input: JSON,
        revision: int | None,
        options: RunOptions,
    ) -> tuple[RunId, Wakeups]:
        """Insert a run of the deployed flow ``ref`` (``NAME`` / ``NAME@REV``; or
        ``revision``) with ``options`` in the transaction open on ``conn`` (the caller
        commits): the flow's row read FOR SHARE (held until that commit), the revision's
        stored definition run and its number recorded (``Run.revision``). Returns the run
        id and the wakeups to publish after the commit.

        Raises SubmitOptionError, FlowNotDeployedError, FlowRetiredError,
        RevisionNotFoundError, InputValidationError, PayloadTooLargeError; nothing is
        written then."""
        name, wanted = parse_flow_reference(ref, revision)
        s = Session(conn, self._db.q)
        deployed = revisions.flow_get_for_submit(s, name=name)
        if deployed is None:
            raise FlowNotDeployedError(name)
        if deployed.retired_at is not None:
            raise FlowRetiredError(name)
        number = deployed.current_revision if wanted is None else wanted
        found = revisions.revision_get(s, flow_name=name, revision=number)
        if found is None:
            raise RevisionNotFoundError(name, number)
        input_json = self._inserter.prepare_input(self._built(found), run_input)
        opts = dataclasses.replace(options, revision=found.revision)
        return self._inserter.insert_stored(conn, found.workflow_id, input_json, opts)

    def _built(self, found: Revision) -> Flow:
        """The :class:`Flow` of a revision's stored definition (child flows not loaded),
        built once per definition id."""
        flow = self._flows.get(found.workflow_id)
        if flow is None:
            if found.definition is None:
                raise ValueError(
                    f"revision {found.revision} of {found.flow_name} has no definition"
                )
            if len(self._flows) >= FLOWS_CACHED:
                self._flows.clear()
            flow = self._flows[found.workflow_id] = build_flow(found.definition)
        return flow


def _revision(s: Session, name: str, revision: int | None) -> Revision:
    """Revision ``revision`` (None: current) of ``name`` with its source and definition.
    Raises FlowNotDeployedError, RevisionNotFoundError."""
    if not storable(name):
        raise FlowNotDeployedError(name)
    if revision is not None and not is_revision(revision):
        found = None  # no such revision (out of the column's range)
    else:
        found = revisions.revision_get(s, flow_name=name, revision=revision)
    if found is not None:
        return found
    if revision is None or revisions.flow_get(s, name=name) is None:
        raise FlowNotDeployedError(name)
    raise RevisionNotFoundError(name, revision)


def _any_schedule(result: SyncResult) -> bool:
    """Whether a schedule plan changes anything."""
    return bool(result.added or result.updated or result.removed)


def _stored_git(found: Revision) -> GitInfo | None:
    """The git facts a revision recorded, None when its file was not in a work tree."""
    if found.git_commit is None or found.git_path is None:
        return None
    return GitInfo(commit=found.git_commit, path=found.git_path, dirty=bool(found.git_dirty))


def _unapplied(result: DeployResult) -> DeployResult:
    """``result`` as not applied (its transaction rolled back)."""
    return dataclasses.replace(result, applied=False)


def _read_sources(paths: Sequence[str]) -> list[_Source]:
    """Every flow file under ``paths`` read, linted and loaded, in file order.

    Raises LintPathError, DeployLintError (every problem, when any file has an error or
    two files declare one flow name: E060)."""
    files = find_flow_files(paths)
    problems: list[Problem] = []
    loaded: list[tuple[str, str, Flow]] = []
    for file in files:
        text, problem = read_text(file)
        if text is None:
            problems += [problem] if problem else []
            continue
        _, found = analyse_text(text, file)
        problems += found
        if any(p.severity == "error" for p in found):
            continue
        try:
            loaded.append((file, text, load_flow_text(text, file)))
        except FlowError as exc:  # a child flow that does not load
            problems += exc.problems
    seen: dict[str, str] = {}
    for file, _, flow in loaded:
        first = seen.setdefault(flow.name, file)
        if first != file:
            problems.append(
                Problem(file, 1, 1, "E060", f"flow name {flow.name} is also declared in {first}")
            )
    if any(p.severity == "error" for p in problems):
        raise DeployLintError(problems)
    return [_Source(path, text, flow, git_info(path)) for path, text, flow in loaded]
