"""Deploying flow files as revisions: what ``Client.deploy``, ``diff``, ``rollback``,
``retire``, ``flow_history``, ``get_revision``, ``load_revision``, ``diff_revisions`` and
the submission of a deployed flow by name delegate to (docs/deploy.md).

A revision is a number per flow name that only grows, with the file's source text as it
was (comments kept), the compiled definition (the content-addressed definition row), when,
by whom and the git commit of the file. ``cyclone_flows`` says which revision is current.
Every change (deploy, rollback, retire) is one transaction under ``flow_lock_deploys``;
a flow's schedules are synced inside it by the :class:`ScheduleSync` the client
gives (``Schedules.register_in`` of :mod:`cyclone_flow.schedule_admin`, a module of the
same layer, so passed in rather than imported). The comparison of two versions is
:mod:`cyclone_flow.flowfile.compare`'s, the git facts :mod:`cyclone_flow.gitinfo`'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.db.rows import DeployedFlow, Revision
from cyclone_flow.errors import SubmitOptionError
from cyclone_flow.flowfile.compare import FlowChange
from cyclone_flow.flowfile.model import JSON, Flow
from cyclone_flow.gitinfo import GitInfo
from cyclone_flow.inserter import Inserter
from cyclone_flow.schedules import ScheduleSpec, SyncResult

__all__ = [
    "CompatProblem",
    "DeployResult",
    "Deployments",
    "FlowPlan",
    "RetireResult",
    "RevisionDiff",
    "ScheduleSync",
    "is_flow_reference",
    "parse_flow_reference",
]

Status = Literal["added", "changed", "unchanged", "removed"]

FLOW_REFERENCE = re.compile(r"[a-z][a-z0-9_-]*(@[0-9]+)?")
"""A deployed flow named where a flow file could be (``submit``): ``NAME`` or ``NAME@REV``."""


def is_flow_reference(value: str) -> bool:
    """Whether ``value`` names a deployed flow (``NAME`` or ``NAME@REV``, see
    :data:`FLOW_REFERENCE`) rather than a flow file: it has that form and is not an
    existing path."""
    return FLOW_REFERENCE.fullmatch(value) is not None and not os.path.exists(value)


def parse_flow_reference(value: str, revision: int | None) -> tuple[str, int | None]:
    """``(name, revision)`` of ``NAME`` / ``NAME@REV``; ``revision`` is the one given
    separately. Raises SubmitOptionError when both give one and they differ, or a revision
    is not a positive int."""
    name, _, rev = value.partition("@")
    if revision is not None:
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
            raise SubmitOptionError("revision", revision, "must be an integer >= 1")
        if rev and int(rev) != revision:
            raise SubmitOptionError("revision", revision, f"differs from the revision in {value!r}")
        return name, revision
    return name, int(rev) if rev else None


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
    ``schedules`` are the schedule names added / updated / removed (predicted by a diff);
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
    a diff or dry run; ``by`` who deployed."""

    flows: tuple[FlowPlan, ...]
    applied: bool
    by: str

    @property
    def changed(self) -> bool:
        """Whether any flow is not ``unchanged`` (``diff``'s exit code 1)."""
        return any(f.status != "unchanged" for f in self.flows)

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
    """Syncs the file schedules ``entries`` of ``flow`` inside the caller's transaction
    on ``conn``, as ``schedule sync`` does, pointing them at ``workflow_id`` and deployed
    ``revision``; ``current`` is the clock of their next ticks; ``check_inputs`` False
    stores an input the flow's schema refuses as given (a forced deploy). Raises
    InputValidationError (an entry's input), SubmitOptionError (a name taken by a
    manual schedule, a bad cron)."""

    def __call__(
        self,
        conn: Conn,
        flow: Flow,
        entries: Sequence[ScheduleSpec],
        *,
        workflow_id: int,
        revision: int | None,
        current: datetime,
        check_inputs: bool = True,
    ) -> SyncResult: ...


class Deployments:
    """The deployed flows of ``db``'s schema; ``inserter`` checks inputs as a submission
    would, ``sync`` syncs a flow's schedules inside a deploy's transaction."""

    def __init__(self, db: Database, inserter: Inserter, sync: ScheduleSync) -> None:
        self._db = db
        self._inserter = inserter
        self._sync = sync

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
        raise NotImplementedError

    def diff(
        self, paths: list[str], *, prune: bool = False, now: datetime | None = None
    ) -> DeployResult:
        """See :meth:`cyclone_flow.Client.diff`."""
        raise NotImplementedError

    def list_flows(self) -> list[DeployedFlow]:
        """See :meth:`cyclone_flow.Client.list_deployed_flows`."""
        raise NotImplementedError

    def get_flow(self, name: str) -> DeployedFlow | None:
        """See :meth:`cyclone_flow.Client.get_deployed_flow`."""
        raise NotImplementedError

    def history(self, name: str) -> list[Revision]:
        """See :meth:`cyclone_flow.Client.flow_history`."""
        raise NotImplementedError

    def get_revision(self, name: str, revision: int | None = None) -> Revision:
        """See :meth:`cyclone_flow.Client.get_revision`."""
        raise NotImplementedError

    def load_revision(self, name: str, revision: int | None = None) -> Flow:
        """See :meth:`cyclone_flow.Client.load_revision`."""
        raise NotImplementedError

    def diff_revisions(self, name: str, old: int, new: int | None = None) -> RevisionDiff:
        """See :meth:`cyclone_flow.Client.diff_revisions`."""
        raise NotImplementedError

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
        raise NotImplementedError

    def retire(self, name: str, *, by: str | None = None) -> RetireResult:
        """See :meth:`cyclone_flow.Client.retire`."""
        raise NotImplementedError
