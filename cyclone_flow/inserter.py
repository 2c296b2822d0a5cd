"""Writing runs: flow and input checks, queue options, and the insert itself, shared by
``Client.submit``/``enqueue`` (and their ``_tx`` forms), ``ctx.submit_completion``/
``ctx.enqueue_completion`` and the schedule scanner (seeds: Transactional Enqueueing,
Queues and Priority, Unique Jobs, Sequences); the one-node flows of jobs
(:meth:`Inserter.job_flow`); and the dry-run preview of a submission
(:func:`preview_run`: what would be written, written nowhere).

Nothing here commits or publishes: :meth:`Inserter.insert` works inside the caller's
transaction and returns the wakeups its owner publishes after the commit (or never, for a
caller-owned transaction: workers then find the run within one poll interval).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cyclone_flow import tracing
from cyclone_flow._json import JSON, Unencodable, encode_payload
from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Conn, Database, Session, autocommit
from cyclone_flow.engine import submit
from cyclone_flow.engine.submit import DefinitionMissingError
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import FlowError, InputValidationError, Problem, TemplateError
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.condition import ConditionSyntaxError, parse_condition
from cyclone_flow.flowfile.inputs import InputValidator, validate_input
from cyclone_flow.flowfile.model import Flow, Limit, Node
from cyclone_flow.notify import Wakeups
from cyclone_flow.options import RunOptions, job_flow

FlowLike = Flow | str | os.PathLike[str]

T = TypeVar("T")


class RunId(str):
    """A run id (UUID text) returned by ``submit``/``enqueue``: a plain ``str`` that also
    says whether a ``unique_key`` matched an existing run (``duplicate`` True: that run's id
    is returned and nothing was written)."""

    duplicate: bool

    def __new__(cls, value: str, duplicate: bool = False) -> RunId:
        self = super().__new__(cls, value)
        self.duplicate = duplicate
        return self


def check_flow(flow: FlowLike) -> Flow:
    """``flow``, loaded if it is a path (with its child flows), after checking that every
    child flow is loaded. No database.

    Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded: E030).
    """
    flow = flow if isinstance(flow, Flow) else load_flow(flow)
    for part in flow.tree():
        for node in part.nodes.values():
            if node.type == "child" and node.name not in part.children:
                raise FlowError(
                    [
                        Problem(
                            part.path or "<string>",
                            1,
                            1,
                            "E030",
                            f"node {node.name!r}: its child flow is not loaded (build "
                            "flows with load_flow or load_flow_text, which load child "
                            "flows)",
                        )
                    ]
                )
    return flow


def encode_input(flow: str, value: JSON, input_limit: int) -> str:
    """The JSON text of a validated run input, at most ``input_limit`` bytes.

    Raises InputValidationError (not encodable as JSON), PayloadTooLargeError."""
    try:
        return encode_payload("input", value, input_limit)
    except Unencodable as exc:
        raise InputValidationError(flow, str(exc)) from None


def prepare_run(flow: FlowLike, run_input: JSON, input_limit: int) -> tuple[Flow, JSON, str]:
    """``(flow, input, encoded input)`` of a submission: ``flow`` loaded if it is a path
    (with its child flows), every child flow checked loaded, the top-level ``default``
    values of its ``input_schema`` filled into ``run_input``, which is validated and
    encoded to at most ``input_limit`` bytes. No database.

    Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded:
    E030), InputValidationError, PayloadTooLargeError.
    """
    flow = check_flow(flow)
    value = validate_input(flow.name, flow.input_schema, run_input)
    return flow, value, encode_input(flow.name, value, input_limit)


@dataclass(frozen=True)
class PlannedStep:
    """One step a submission would write (:func:`preview_run`).

    ``state`` is the one submit leaves (``available``: an action without needs;
    ``waiting``: another node type without needs, started by submit; ``pending``: a node
    with needs, released when they complete; a ``when:`` of a node submit releases is
    decided at submit on the run input: ``skipped`` when false, and its descendants through
    ``on_dep_skip: skip`` with it, ``discarded`` when it cannot be evaluated); ``queue`` /
    ``priority`` are after the submission's overrides; ``timeout_s`` seconds or None;
    ``detail`` holds what its node type adds (fan-out: ``over``, ``max_parallel``; child:
    ``flow``, ``max_wait_s``; wait_signal: ``signal``, ``max_wait_s``), its ``when`` and,
    decided at submit, the ``skip_reason`` or the ``error``.
    """

    node: str
    type: str
    call: str | None
    queue: str
    priority: int
    needs: tuple[str, ...]
    state: str
    max_attempts: int
    timeout_s: float | None
    detail: dict[str, JSON]


@dataclass(frozen=True)
class RunPreview:
    """What a submission would write (:func:`preview_run`): the flow's ``name`` and ``path``,
    the validated ``input`` (defaults filled) and its encoded size ``input_bytes``, the
    validated ``options``, the ``steps`` in an order they can run (a node after its
    needs, file order among the ready ones) and the names of the ``child_flows`` whose
    definitions are stored with it (their runs start when their nodes do)."""

    flow: str
    path: str | None
    input: JSON
    input_bytes: int
    options: RunOptions
    steps: tuple[PlannedStep, ...]
    child_flows: tuple[str, ...]


def preview_run(
    flow: FlowLike, run_input: JSON, options: RunOptions, input_limit: int
) -> RunPreview:
    """The plan of a submission of ``flow`` with ``run_input`` and ``options``, checked as
    submit checks it (:func:`prepare_run`) but written nowhere: the rows
    ``step_insert_plan`` would insert, as submit would set their state, queue and
    priority. Whether a ``unique_key`` matches a run, or a ``sequence`` holds this one,
    only the database says at submit.

    Raises FlowError, InputValidationError, PayloadTooLargeError.
    """
    flow, value, text = prepare_run(flow, run_input, input_limit)
    order = {name: i for i, name in enumerate(flow.nodes)}
    import networkx as nx  # here only: a dry run plans, a worker never does

    graph = nx.DiGraph()
    graph.add_nodes_from(flow.nodes)
    graph.add_edges_from((need, n.name) for n in flow.nodes.values() for need in n.needs)
    planned = []
    decided: dict[str, str] = {}  # node -> the state submit leaves it in
    for name in nx.lexicographical_topological_sort(graph, key=order.__getitem__):
        n = flow.nodes[name]
        state, decision = _planned_state(n, decided, value)
        decided[name] = state
        detail: dict[str, JSON] = {}
        if n.type == "fan_out":
            detail = {"over": n.options.get("over"), "max_parallel": n.options.get("max_parallel")}
        elif n.type == "child":
            child = flow.children.get(n.name)
            detail = {"flow": child.name if child else None, "max_wait_s": n.max_wait_s}
        elif n.type == "wait_signal":
            detail = {"signal": n.options.get("signal"), "max_wait_s": n.max_wait_s}
        if n.concurrency is not None:
            detail["concurrency"] = _planned_limit(n.concurrency, value)
        if n.rate_limit is not None:
            detail["rate_limit"] = _planned_limit(n.rate_limit, value)
        planned.append(
            PlannedStep(
                node=n.name,
                type=n.type,
                call=n.call,
                queue=n.queue if options.queue is None or n.queue_set else options.queue,
                priority=(
                    n.priority if options.priority is None or n.priority_set else options.priority
                ),
                needs=tuple(n.needs),
                state=state,
                max_attempts=n.retry.max_attempts,
                timeout_s=n.timeout_s,
                detail={**detail, **({"when": n.when} if n.when is not None else {}), **decision},
            )
        )
    return RunPreview(
        flow=flow.name,
        path=flow.path,
        input=value,
        input_bytes=len(text.encode("utf-8")),
        options=options,
        steps=tuple(planned),
        # one per stored definition (content-addressed: a flow used twice is stored once)
        child_flows=tuple(
            name for name, _ in dict.fromkeys((p.name, p.digest) for p in flow.tree()[1:])
        ),
    )


def _planned_limit(limit: Limit, run_input: JSON) -> dict[str, JSON]:
    """A dry run's view of a limit, as ``status --json`` shows a step's: ``key`` (as
    submit renders it, ``cyclone_limit_key``: ``GROUP``, ``GROUP/VALUE``, ``GROUP/null``
    for a missing value; a key from an ancestor's output, rendered at the first claim, as
    ``GROUP/${{ nodes.NODE.output.PATH }}``), ``limit`` and, for a rate limit,
    ``per_s``."""
    key = limit.group
    if limit.key_node is not None:
        path = "".join(f".{part}" for part in limit.key_path or ())
        key += f"/${{{{ nodes.{limit.key_node}.output{path} }}}}"
    elif limit.key_path is not None:
        value: JSON = run_input
        for part in limit.key_path:
            if isinstance(value, dict):
                value = value.get(part)
            elif isinstance(value, list) and part.lstrip("-").isdigit():
                index = int(part)
                value = value[index] if -len(value) <= index < len(value) else None
            else:
                value = None
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        key += f"/{shown}"
    elif limit.key_value is not None:
        key += f"/{limit.key_value}"
    out: dict[str, JSON] = {"key": key, "limit": limit.limit}
    if limit.per_s is not None:
        out["per_s"] = limit.per_s
    return out


def _planned_state(
    node: Node, decided: dict[str, str], run_input: JSON
) -> tuple[str, dict[str, JSON]]:
    """The state submit leaves ``node`` in, given the states ``decided`` for the nodes
    before it, and what decided it (``when``, ``skip_reason``, ``error``): submit inserts
    every node pending, releases those whose needs are done (none, or all skipped under
    ``on_dep_skip: run``) and decides a released node's ``when:`` on the run input (a
    skipped node's output reads as null); a false one skips it and its pending
    descendants through ``on_dep_skip: skip`` (engine/advance.py), one that cannot be
    evaluated discards it (the ``error``)."""
    skipped = [need for need in node.needs if decided.get(need) == "skipped"]
    if skipped and node.on_dep_skip == "skip":
        return "skipped", {"skip_reason": {"upstream": min(skipped)}}  # as the cascade says
    if len(skipped) < len(node.needs):
        return "pending", {}  # released when its needs complete, its when: decided then
    released = "available" if node.type == "action" else "waiting"
    if node.when is None:
        return released, {}
    try:
        holds, values = parse_condition(node.when).evaluate(run_input, lambda _name: None)
    except (ConditionSyntaxError, TemplateError) as exc:
        message = exc.message if isinstance(exc, ConditionSyntaxError) else str(exc)
        return "discarded", {"error": message}
    if holds:
        return released, {}
    return "skipped", {"skip_reason": {"when": node.when, "values": values}}


JOB_FLOWS_CACHED = 256
"""The most job flows (callable, retry, timeout) an inserter keeps built and digested."""
CACHE_ENTRIES = 256
"""The most definitions (ids and compiled input validators) an inserter remembers; past it
the memory starts over (a cache, not a registry: a miss only costs a round trip)."""

DefinitionKey = tuple[str, str]
"""``(name, digest)`` of a definition: what an inserter remembers it by."""


class Inserter:
    """Prepares and inserts runs for one client (its database, payload limits and
    ``max_signal_wait``): the one path every submission takes (River's ``Client.Insert``;
    River's *producer* is the worker-side fetch loop, here the claim loop).

    It remembers, per definition ``(name, digest)``, the compiled input validator and the
    id of the stored definition once a transaction of its own that stored it committed, so
    a later submission of the same flow neither compiles the schema nor stores the
    definition again. A remembered definition that is gone (a schema emptied under a live
    client) is found out by the insert, which then writes nothing: the definition is
    stored again and the insert repeated (:class:`DefinitionMissingError`)."""

    def __init__(self, db: Database, config: ClientConfig) -> None:
        self.db = db
        self.config = config
        self._definitions: dict[DefinitionKey, int] = {}
        self._validators: dict[DefinitionKey, InputValidator] = {}
        self._jobs: dict[Any, Flow] = {}  # job flows built once: job_flow

    # -- checks (no database) --------------------------------------------------------------

    def prepare(self, flow: FlowLike, run_input: JSON) -> tuple[Flow, str]:
        """Load ``flow`` if it is a path (with its child flows), check that every child
        flow is loaded, fill the top-level ``default`` values of its ``input_schema`` into
        ``run_input``, validate and encode it (:func:`prepare_run` with this client's
        input limit and a compiled validator remembered per definition).

        Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded:
        E030), InputValidationError, PayloadTooLargeError; nothing is written.
        """
        flow = check_flow(flow)
        return flow, self.prepare_input(flow, run_input)

    def prepare_input(self, flow: Flow, run_input: JSON) -> str:
        """The validated and encoded ``run_input`` of the checked flow ``flow``
        (:func:`check_flow`): defaults filled, validated with the remembered compiled
        validator, encoded within this client's input limit.

        Raises InputValidationError, PayloadTooLargeError."""
        key = (flow.name, flow.digest)
        validator = self._validators.get(key)
        if validator is None:
            if len(self._validators) >= CACHE_ENTRIES:
                self._validators.clear()
            validator = self._validators[key] = InputValidator(flow.name, flow.input_schema)
        value = validator(run_input)
        return encode_input(flow.name, value, self.config.payload_limits.input_bytes)

    # -- job flows (no database) ------------------------------------------------------------

    def job_flow(self, call: str, retry: Any, timeout: Any) -> Flow:
        """The one-node flow of a job (:func:`~cyclone_flow.options.job_flow`), built and
        digested once per ``(callable, retry, timeout)`` of hashable values (at most
        :data:`JOB_FLOWS_CACHED`). Raises SubmitOptionError for a bad retry or timeout."""
        try:
            key: Any = (call, type(retry), retry, type(timeout), timeout)
            hash(key)
        except TypeError:  # a retry mapping: built each time
            return job_flow(call, retry=retry, timeout=timeout)
        flow = self._jobs.get(key)
        if flow is None:
            if len(self._jobs) >= JOB_FLOWS_CACHED:
                self._jobs.clear()
            flow = self._jobs[key] = job_flow(call, retry=retry, timeout=timeout)
        return flow

    def job_options(self, call: str, options: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        """The job flow of ``call`` with the ``retry`` and ``timeout`` of ``options``, and
        the other options (the run's, not checked yet: ``options.run_options``)."""
        rest = dict(options)
        return self.job_flow(call, rest.pop("retry", None), rest.pop("timeout", None)), rest

    # -- definitions -----------------------------------------------------------------------

    def _definition(self, tx: Tx, flow: Flow) -> tuple[int, bool]:
        """``(id, remembered)``: the remembered id of ``flow``'s stored definition, or the
        one :func:`~cyclone_flow.engine.submit.store_definition` returns in ``tx``."""
        workflow_id = self._definitions.get((flow.name, flow.digest))
        if workflow_id is not None:
            return workflow_id, True
        return submit.store_definition(tx, flow), False

    def _remember(self, flow: Flow, workflow_id: int) -> None:
        """Remember ``workflow_id`` for ``flow`` (call only after the commit that stored it)."""
        if len(self._definitions) >= CACHE_ENTRIES:
            self._definitions.clear()
        self._definitions[(flow.name, flow.digest)] = workflow_id

    def _forget(self, flow: Flow) -> None:
        self._definitions.pop((flow.name, flow.digest), None)

    def _with_definition(
        self, tx: Tx, flow: Flow, workflow_id: int, remembered: bool, insert: Callable[[int], T]
    ) -> tuple[T, int, bool]:
        """``insert(workflow_id)``, returned with the id used and whether it is still the
        remembered one. When a remembered id's definition is gone (``insert`` raised
        DefinitionMissingError: nothing was written), it is forgotten, the definition is
        stored again in ``tx`` and ``insert`` runs once more with the new id."""
        try:
            return insert(workflow_id), workflow_id, remembered
        except DefinitionMissingError:
            if not remembered:
                raise
        self._forget(flow)
        workflow_id = submit.store_definition(tx, flow)
        return insert(workflow_id), workflow_id, False

    def _limits(self) -> tuple[int, float | None]:
        max_wait = self.config.max_signal_wait
        return self.config.payload_limits.output_bytes, max_wait if max_wait > 0 else None

    # -- one run ---------------------------------------------------------------------------

    def insert(
        self, conn: Conn, flow: Flow, input_json: str, options: RunOptions
    ) -> tuple[RunId, Wakeups]:
        """Store the definition of a prepared run (with its child flows and plan; not when
        remembered) and insert the run with ``options`` in the caller's transaction on
        ``conn``; return its id and the wakeups to publish after the commit (none for a
        duplicate, a held run of a sequence, or a delayed run). A definition stored here
        is not remembered: the caller's transaction may still roll back. Traced as one
        ``cyclone.submit`` span (:mod:`cyclone_flow.tracing`)."""
        with tracing.submit_span(flow.name) as span:
            tx = Tx(conn, self.db.q)
            workflow_id, remembered = self._definition(tx, flow)
            inserted, _, _ = self._with_definition(
                tx,
                flow,
                workflow_id,
                remembered,
                lambda wid: self.insert_stored(conn, wid, input_json, options),
            )
            span.run_id(inserted[0])
        return inserted

    def submit(
        self,
        conn: Conn,
        flow: Flow,
        input_json: str,
        options: RunOptions,
        *,
        before_commit: Callable[[Conn, RunId], None] | None = None,
    ) -> tuple[RunId, Wakeups]:
        """Insert a prepared run in a transaction of its own on the idle ``conn`` and
        commit it; return its id and the wakeups to publish now. ``before_commit(conn,
        run_id)`` runs in that transaction after the insert.

        When the definition is remembered, the options need no read first (no unique key
        or sequence: :func:`~cyclone_flow.engine.submit.pipelinable`) and the flow's
        roots are all actions, the write is one round trip and one commit (the run, its
        steps and deps in one statement, in autocommit). The definition a transaction of
        this call stored is remembered after its commit. Traced as one ``cyclone.submit``
        span (:mod:`cyclone_flow.tracing`).
        """
        with tracing.submit_span(flow.name) as span:
            run_id, wakeups = self._submit(conn, flow, input_json, options, before_commit)
            span.run_id(run_id)
        return run_id, wakeups

    def _submit(
        self,
        conn: Conn,
        flow: Flow,
        input_json: str,
        options: RunOptions,
        before_commit: Callable[[Conn, RunId], None] | None,
    ) -> tuple[RunId, Wakeups]:
        key = (flow.name, flow.digest)
        workflow_id = self._definitions.get(key)
        if (
            workflow_id is not None
            and before_commit is None
            and submit.pipelinable(options)
            and flow.roots_are_actions
            and not flow.has_limits
        ):
            output_limit, max_wait = self._limits()
            with autocommit(conn):  # one statement: its own transaction
                run_id = submit.insert_run_alone(
                    Session(conn, self.db.q),
                    workflow_id,
                    input_json,
                    options,
                    output_limit=output_limit,
                    max_signal_wait_s=max_wait,
                    traceparent=tracing.current_traceparent(),
                )
            if run_id is not None:  # committed
                queues = set() if options.delayed else flow.root_queues(options.queue)
                return RunId(run_id), Wakeups(queues=queues)
            self._forget(flow)  # that transaction wrote nothing: the definition is gone
        with conn.transaction():
            tx = Tx(conn, self.db.q)
            workflow_id, remembered = self._definition(tx, flow)
            (run_id, wakeups), workflow_id, _ = self._with_definition(
                tx,
                flow,
                workflow_id,
                remembered,
                lambda wid: self.insert_stored(conn, wid, input_json, options),
            )
            if before_commit is not None:
                before_commit(conn, run_id)
        self._remember(flow, workflow_id)
        return run_id, wakeups

    def insert_stored(
        self, conn: Conn, workflow_id: int, input_json: str, options: RunOptions
    ) -> tuple[RunId, Wakeups]:
        """Like :meth:`insert`, for a definition stored already (a schedule's tick): the
        run is inserted from its plan with this client's output limit and
        ``max_signal_wait`` recorded on it (Client Options: Limits and Retention,
        WithMaxSignalWait), and the queue options applied (see
        :func:`cyclone_flow.engine.submit.insert_run`).

        Raises DefinitionMissingError (nothing written) when ``workflow_id`` is not stored.
        """
        output_limit, max_wait = self._limits()
        tx = Tx(conn, self.db.q)
        inserted = submit.insert_run(
            tx,
            workflow_id,
            input_json,
            options,
            output_limit=output_limit,
            max_signal_wait_s=max_wait,
            traceparent=tracing.current_traceparent(),
        )
        wakeups = tx.effects.wakeups
        if options.delayed:  # nothing is claimable before run_at: the poll finds it then
            wakeups.queues.clear()
        return RunId(inserted.run_id, duplicate=not inserted.created), wakeups

    # -- a chunk of runs -------------------------------------------------------------------

    def insert_many(
        self, conn: Conn, flow: Flow, items: Sequence[tuple[str, RunOptions]]
    ) -> tuple[list[RunId], Wakeups]:
        """Insert a chunk of prepared runs of ``flow`` (``(input JSON text, options)``
        each) in the caller's transaction on ``conn``; their ids in item order and the
        wakeups to publish after the commit (one set of queues for the chunk).

        The items whose options need no read first (no unique key, no sequence) are
        written with one set-based statement per table
        (:func:`~cyclone_flow.engine.submit.insert_runs`); the others then one by one in
        item order through the single-run insert, in the same transaction (so a second
        item with a unique key is a duplicate of the first, and sequence positions follow
        the item order). The definition is stored once (not when remembered). Traced as
        one ``cyclone.submit`` span for the chunk."""
        with tracing.submit_span(flow.name, len(items)):
            ids, wakeups, _ = self._insert_many(conn, flow, items)
        return ids, wakeups

    def submit_many(
        self, conn: Conn, flow: Flow, items: Sequence[tuple[str, RunOptions]]
    ) -> tuple[list[RunId], Wakeups]:
        """:meth:`insert_many` in a transaction of its own on the idle ``conn``, committed;
        the definition is remembered after the commit."""
        with tracing.submit_span(flow.name, len(items)), conn.transaction():
            ids, wakeups, workflow_id = self._insert_many(conn, flow, items)
        self._remember(flow, workflow_id)
        return ids, wakeups

    def _insert_many(
        self, conn: Conn, flow: Flow, items: Sequence[tuple[str, RunOptions]]
    ) -> tuple[list[RunId], Wakeups, int]:
        tx = Tx(conn, self.db.q)
        workflow_id, remembered = self._definition(tx, flow)
        output_limit, max_wait = self._limits()
        traceparent = tracing.current_traceparent()
        limits = flow.has_limits  # written run by run (insert_run renders the keys)
        bulk = [i for i, (_, o) in enumerate(items) if submit.pipelinable(o) and not limits]
        out: list[RunId | None] = [None] * len(items)
        if bulk:
            chunk = [items[i] for i in bulk]
            ids, workflow_id, remembered = self._with_definition(
                tx,
                flow,
                workflow_id,
                remembered,
                lambda wid: submit.insert_runs(
                    tx,
                    flow,
                    wid,
                    chunk,
                    output_limit=output_limit,
                    max_signal_wait_s=max_wait,
                    traceparent=traceparent,
                ),
            )
            for i, run_id in zip(bulk, ids, strict=True):
                out[i] = RunId(run_id)
        wakeups = tx.effects.wakeups
        for i, (input_json, options) in enumerate(items):
            if out[i] is not None:
                continue
            (run_id, woken), workflow_id, remembered = self._with_definition(
                tx,
                flow,
                workflow_id,
                remembered,
                functools.partial(self.insert_stored, conn, input_json=input_json, options=options),
            )
            out[i] = run_id
            wakeups.merge(woken)
        return [r for r in out if r is not None], wakeups, workflow_id
