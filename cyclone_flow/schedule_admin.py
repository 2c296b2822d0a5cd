"""Editing the cron schedules of one schema: what ``Client.sync_schedules``,
``add_schedule``, ``list_schedules``, ``get_schedule``, ``remove_schedule``,
``pause_schedule`` and ``resume_schedule`` delegate to (docs/queues.md). Tick arithmetic
and name rules are :mod:`cyclone_flow.schedules`; submitting the due ticks is the schedule
scanner's (the maintenance loop).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from cyclone_flow.db import flow_revisions, session
from cyclone_flow.db import schedules as stored
from cyclone_flow.db.conn import Conn, Database, Session
from cyclone_flow.db.rows import ScheduleRow
from cyclone_flow.engine.submit import store_definition
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import (
    FlowRetiredError,
    InputValidationError,
    ScheduleNotFoundError,
    SubmitOptionError,
)
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.model import JSON, Flow
from cyclone_flow.inserter import FlowLike, Inserter, encode_input
from cyclone_flow.schedules import (
    ScheduleSpec,
    SyncResult,
    Ticks,
    default_schedule_name,
    flow_schedules,
    validate_schedule_name,
)
from cyclone_flow.text import storable

__all__ = ["Schedules"]


class Schedules:
    """The schedules of ``db``'s schema; ``inserter`` checks and encodes each schedule's
    input as a submission would (the flow's ``input_schema``, the input size limit)."""

    def __init__(self, db: Database, inserter: Inserter) -> None:
        self._db = db
        self._inserter = inserter

    def sync(self, flow: FlowLike, *, now: datetime | None = None) -> SyncResult:
        """See :meth:`cyclone_flow.Client.sync_schedules`."""
        loaded = flow if isinstance(flow, Flow) else load_flow(flow)
        return self._register(loaded, flow_schedules(loaded), "flow", now)

    def add(
        self,
        flow: FlowLike,
        cron: str,
        *,
        timezone: str = "UTC",
        input: JSON = None,
        name: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """See :meth:`cyclone_flow.Client.add_schedule`."""
        loaded = flow if isinstance(flow, Flow) else load_flow(flow)
        entry = ScheduleSpec(
            name=name or default_schedule_name(loaded.name, cron, timezone, input),
            cron=cron,
            timezone=timezone,
            input=input,
        )
        self._register(loaded, [entry], "manual", now)
        return entry.name

    def rows(self) -> list[ScheduleRow]:
        """Every schedule, by name."""
        with self._db.session() as s:
            return stored.schedule_list(s)

    def get(self, name: str) -> ScheduleRow | None:
        """The schedule ``name``, None when there is none."""
        if not storable(name):
            return None
        with self._db.session() as s:
            return stored.schedule_get(s, name=name)

    def remove(self, name: str) -> None:
        """Delete the schedule ``name``; raises ScheduleNotFoundError."""
        if not storable(name):
            raise ScheduleNotFoundError(name)
        with self._db.session() as s:
            if not stored.schedule_delete(s, name=name):
                raise ScheduleNotFoundError(name)

    def pause(self, name: str) -> None:
        """Pause the schedule ``name``; raises ScheduleNotFoundError."""
        if not storable(name) or not self._set_paused(name, True, None):
            raise ScheduleNotFoundError(name)

    def resume(self, name: str, *, now: datetime | None = None) -> None:
        """Resume the schedule ``name`` from the first tick after now (a paused one; an
        active one is left as it is); raises ScheduleNotFoundError, FlowRetiredError (its
        flow is a retired deployed flow)."""
        row = self.get(name)
        if row is None:
            raise ScheduleNotFoundError(name)
        with self._db.session() as s:
            _refuse_retired(s, row.flow_name)
            current = session.pg_now(s, now=now)
        next_run_at = Ticks(row.cron, row.timezone).after(current)
        if not self._set_paused(name, False, next_run_at if row.paused else None):
            raise ScheduleNotFoundError(name)

    def _set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        with self._db.session() as s:
            return stored.schedule_set_paused(s, name=name, paused=paused, next_run_at=next_run_at)

    def _register(
        self, flow: Flow, entries: Sequence[ScheduleSpec], source: str, now: datetime | None
    ) -> SyncResult:
        """Create or update ``entries`` (schedules of ``flow`` from ``source``: ``flow``
        for a flow file's, ``manual`` for :meth:`add`) by name, and with ``flow`` delete
        the flow's other file-declared schedules, in one transaction of its own (see
        :meth:`_write`). Every entry is checked before anything is written. Raises
        FlowRetiredError when ``flow`` is a retired deployed flow (no schedule of it may
        be added or synced until it is deployed again)."""
        prepared = self._prepare(flow, entries, check_inputs=True)
        with self._db.session() as s:
            _refuse_retired(s, flow.name)
            current = session.pg_now(s, now=now)
        with self._db.transaction() as conn:
            workflow_id = store_definition(Tx(conn, self._db.q), flow) if prepared else 0
            return self._write(conn, flow, prepared, source, workflow_id, None, current)

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
        """``schedule sync`` of ``flow``'s file schedules ``entries`` inside the caller's
        transaction on ``conn`` (deploy, rollback): as :meth:`sync`, with the stored
        definition ``workflow_id`` and the deployed ``revision`` recorded on each, next
        ticks after ``current``. ``check_inputs`` False stores an input its schema refuses
        (a forced deploy) as given, the others checked and defaults filled as always.
        Raises InputValidationError, PayloadTooLargeError,
        SubmitOptionError (a bad name or cron, a name taken by a manual schedule)."""
        prepared = self._prepare(flow, entries, check_inputs=check_inputs)
        return self._write(conn, flow, prepared, "flow", workflow_id, revision, current)

    def _prepare(
        self, flow: Flow, entries: Sequence[ScheduleSpec], *, check_inputs: bool
    ) -> list[tuple[ScheduleSpec, Ticks, str]]:
        """Each entry with its ticks and encoded input, all checked first (name, cron and
        timezone; input against the flow's schema unless ``check_inputs`` is False)."""
        prepared = []
        for entry in entries:
            validate_schedule_name(entry.name)
            ticks = Ticks(entry.cron, entry.timezone)
            try:
                _, input_json = self._inserter.prepare(flow, entry.input)
            except InputValidationError:
                if check_inputs:
                    raise
                limit = self._inserter.config.payload_limits.input_bytes
                input_json = encode_input(flow.name, entry.input, limit)
            prepared.append((entry, ticks, input_json))
        return prepared

    def _write(
        self,
        conn: Conn,
        flow: Flow,
        prepared: Sequence[tuple[ScheduleSpec, Ticks, str]],
        source: str,
        workflow_id: int,
        revision: int | None,
        current: datetime,
    ) -> SyncResult:
        """Write the ``prepared`` entries of ``flow`` from ``source`` on ``conn`` (in its
        transaction), each submitting ``workflow_id`` (deployed ``revision``, or None).
        An unnamed ``flow`` entry (named ``<flow>-<digest>``) that matches a schedule an
        earlier version named by its position (``<flow>``, ``<flow>-<n>``: same cron,
        timezone and input) updates that one, which keeps its name. With ``flow``, the
        flow's other file-declared schedules are deleted."""
        s = Session(conn, self._db.q)
        added: list[str] = []
        updated: list[str] = []
        names: list[str] = []
        taken = [entry.name for entry, _, _ in prepared]
        for entry, ticks, input_json in prepared:
            name = _resolve_name(s, flow, entry, input_json, source, taken)
            _check_source(name, stored.schedule_get_source(s, name=name), source)
            names.append(name)
            created = stored.schedule_upsert(
                s,
                name=name,
                flow_name=flow.name,
                workflow_id=workflow_id,
                cron=entry.cron,
                timezone=entry.timezone,
                input=input_json,
                source=source,
                next_run_at=ticks.after(current),
                revision=revision,
            )
            (added if created else updated).append(name)
        removed = (
            stored.schedule_delete_flow_stale(s, flow_name=flow.name, keep=names)
            if source == "flow"
            else []
        )
        return SyncResult(added=added, updated=updated, removed=removed)

    def plan_in(
        self, s: Session, flow: Flow, entries: Sequence[ScheduleSpec], *, revision: int | None
    ) -> SyncResult:
        """What :meth:`register_in` of ``flow``'s file schedules ``entries``, followed by
        pointing every schedule of the flow at its new current revision, would change, by
        reads only (deploy's plan; ``diff``). ``revision`` is the flow's current revision
        before the call (None: never deployed); a schedule pointing at another one is out
        of sync. ``added``: entries with no stored row (names resolved as :meth:`_write`
        does); ``updated``: stored rows whose cron, timezone or input (defaults filled,
        compared as JSON values) differ, or that are out of sync (manual ones too);
        ``removed``: the flow's file schedules not among the entries. A row that only
        follows the flow to its new revision is not reported. Raises as
        :meth:`register_in` does, but an input the schema refuses (a compatibility
        problem, reported by the caller)."""
        prepared = self._prepare(flow, entries, check_inputs=False)
        taken = [entry.name for entry, _, _ in prepared]
        added: list[str] = []
        updated: list[str] = []
        names: list[str] = []
        for entry, _, input_json in prepared:
            name = _resolve_name(s, flow, entry, input_json, "flow", taken)
            row = stored.schedule_get(s, name=name)
            _check_source(name, None if row is None else row.source, "flow")
            names.append(name)
            if row is None:
                added.append(name)
            elif (
                row.flow_name != flow.name
                or (row.cron, row.timezone) != (entry.cron, entry.timezone)
                or row.input != json.loads(input_json)
                or not _in_sync(row, revision)
            ):
                updated.append(name)
        removed = []
        for row in stored.schedule_list_for_flow(s, flow_name=flow.name):
            if row.source == "flow" and row.name not in names:
                removed.append(row.name)
            elif row.source != "flow" and not _in_sync(row, revision):
                updated.append(row.name)
        return SyncResult(added=added, updated=updated, removed=removed)


def _in_sync(row: ScheduleRow, revision: int | None) -> bool:
    """Whether ``row`` points at the flow's current ``revision`` (None: never deployed:
    no row is)."""
    return revision is not None and row.revision == revision


def _resolve_name(
    s: Session,
    flow: Flow,
    entry: ScheduleSpec,
    input_json: str,
    source: str,
    taken: list[str],
) -> str:
    """The name ``entry`` of ``flow`` is stored under: its own, or for an unnamed ``flow``
    entry the name an earlier version gave it by position (same cron, timezone and input;
    not ``taken`` by another entry)."""
    if source != "flow" or entry.named:
        return entry.name
    positional = stored.schedule_get_positional(
        s,
        flow_name=flow.name,
        cron=entry.cron,
        timezone=entry.timezone,
        input=input_json,
        taken=taken,
    )
    return positional or entry.name


def _check_source(name: str, other: str | None, source: str) -> None:
    """Refuse to overwrite the schedule ``name`` stored from ``other`` with one from
    ``source`` (SubmitOptionError)."""
    if other is not None and other != source:
        raise SubmitOptionError(
            "name",
            name,
            f"a schedule of this name was created by "
            f"{'schedule sync' if other == 'flow' else 'schedule add'}; remove it "
            "first or pick another name",
        )


def _refuse_retired(s: Session, flow_name: str) -> None:
    """Raise FlowRetiredError when ``flow_name`` is a retired deployed flow."""
    deployed = flow_revisions.flow_get(s, name=flow_name)
    if deployed is not None and deployed.retired_at is not None:
        raise FlowRetiredError(flow_name)
