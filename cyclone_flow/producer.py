"""Writing runs: flow and input checks, queue options, and the insert itself, shared by
``Client.submit``/``enqueue`` (and their ``_tx`` forms), ``ctx.submit_completion``/
``ctx.enqueue_completion`` and the schedule scanner (seeds: Transactional Enqueueing,
Queues and Priority, Unique Jobs, Sequences).

Nothing here commits or publishes: :meth:`Producer.insert` works inside the caller's
transaction and returns the wakeups its owner publishes after the commit (or never, for a
caller-owned transaction: workers then find the run within one poll interval).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cyclone_flow._json import JSON, Unencodable, encode_payload
from cyclone_flow.config import ClientConfig
from cyclone_flow.db.conn import Conn, Database
from cyclone_flow.engine import submit
from cyclone_flow.engine.tx import Tx
from cyclone_flow.errors import FlowError, InputValidationError, Problem
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.inputs import validate_input
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.notify import Wakeups
from cyclone_flow.options import RunOptions

FlowLike = Flow | str | os.PathLike[str]


class RunId(str):
    """A run id (UUID text) returned by ``submit``/``enqueue``: a plain ``str`` that also
    says whether a ``unique_key`` matched an existing run (``duplicate`` True: that run's id
    is returned and nothing was written)."""

    duplicate: bool

    def __new__(cls, value: str, duplicate: bool = False) -> RunId:
        self = super().__new__(cls, value)
        self.duplicate = duplicate
        return self


def prepare_run(flow: FlowLike, run_input: JSON, input_limit: int) -> tuple[Flow, JSON, str]:
    """``(flow, input, encoded input)`` of a submission: ``flow`` loaded if it is a path
    (with its child flows), every child flow checked loaded, the top-level ``default``
    values of its ``input_schema`` filled into ``run_input``, which is validated and
    encoded to at most ``input_limit`` bytes. No database.

    Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded:
    E030), InputValidationError, PayloadTooLargeError.
    """
    spec = flow if isinstance(flow, Flow) else load_flow(flow)
    for part in spec.tree():
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
    value = validate_input(spec.name, spec.input_schema, run_input)
    try:
        text = encode_payload("input", value, input_limit)
    except Unencodable as exc:
        raise InputValidationError(spec.name, str(exc)) from None
    return spec, value, text


@dataclass(frozen=True)
class PlannedStep:
    """One step a submission would write (:func:`plan_run`).

    ``state`` is the one submit leaves (``available``: an action without needs;
    ``waiting``: another node type without needs, started by submit; ``pending``: a node
    with needs, released when they complete); ``queue`` / ``priority`` are after the
    submission's overrides; ``timeout_s`` seconds or None; ``detail`` holds what its node
    type adds (fan-out: ``over``, ``max_parallel``; child: ``flow``, ``max_wait_s``;
    wait_signal: ``signal``, ``max_wait_s``).
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
class RunPlan:
    """What a submission would write (:func:`plan_run`): the flow's ``name`` and ``path``,
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


def plan_run(flow: FlowLike, run_input: JSON, options: RunOptions, input_limit: int) -> RunPlan:
    """The plan of a submission of ``flow`` with ``run_input`` and ``options``, checked as
    submit checks it (:func:`prepare_run`) but written nowhere: the rows
    ``step_insert_plan`` would insert, as submit would set their state, queue and
    priority. Whether a ``unique_key`` matches a run, or a ``sequence`` holds this one,
    only the database says at submit.

    Raises FlowError, InputValidationError, PayloadTooLargeError.
    """
    spec, value, text = prepare_run(flow, run_input, input_limit)
    order = {name: i for i, name in enumerate(spec.nodes)}
    import networkx as nx  # here only: a dry run plans, a worker never does

    graph = nx.DiGraph()
    graph.add_nodes_from(spec.nodes)
    graph.add_edges_from((need, n.name) for n in spec.nodes.values() for need in n.needs)
    planned = []
    for name in nx.lexicographical_topological_sort(graph, key=order.__getitem__):
        n = spec.nodes[name]
        detail: dict[str, JSON] = {}
        if n.type == "fan_out":
            detail = {"over": n.options.get("over"), "max_parallel": n.options.get("max_parallel")}
        elif n.type == "child":
            child = spec.children.get(n.name)
            detail = {"flow": child.name if child else None, "max_wait_s": n.max_wait_s}
        elif n.type == "wait_signal":
            detail = {"signal": n.options.get("signal"), "max_wait_s": n.max_wait_s}
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
                state=("pending" if n.needs else "available" if n.type == "action" else "waiting"),
                max_attempts=n.retry.max_attempts,
                timeout_s=n.timeout_s,
                detail=detail,
            )
        )
    return RunPlan(
        flow=spec.name,
        path=spec.path,
        input=value,
        input_bytes=len(text.encode("utf-8")),
        options=options,
        steps=tuple(planned),
        # one per stored definition (content-addressed: a flow used twice is stored once)
        child_flows=tuple(
            name for name, _ in dict.fromkeys((p.name, p.digest) for p in spec.tree()[1:])
        ),
    )


class Producer:
    """Prepares and inserts runs for one client (its database, payload limits and
    ``max_signal_wait``): the one path every submission takes."""

    def __init__(self, db: Database, config: ClientConfig) -> None:
        self.db = db
        self.config = config

    def prepare(self, flow: FlowLike, run_input: JSON) -> tuple[Flow, str]:
        """Load ``flow`` if it is a path (with its child flows), check that every child
        flow is loaded, fill the top-level ``default`` values of its ``input_schema`` into
        ``run_input``, validate and encode it (:func:`prepare_run` with this client's
        input limit).

        Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded:
        E030), InputValidationError, PayloadTooLargeError; nothing is written.
        """
        spec, _value, text = prepare_run(flow, run_input, self.config.payload_limits.input_bytes)
        return spec, text

    def insert(
        self, conn: Conn, flow: Flow, input_json: str, options: RunOptions
    ) -> tuple[RunId, Wakeups]:
        """Store the definition of a prepared run (with its child flows and plan) and insert
        the run with ``options`` in the caller's transaction on ``conn``; return its id and
        the wakeups to publish after the commit (none for a duplicate, a held run of a
        sequence, or a delayed run)."""
        workflow_id = submit.store_definition(Tx(conn, self.db.q), flow)
        return self.insert_stored(conn, workflow_id, input_json, options)

    def insert_stored(
        self, conn: Conn, workflow_id: int, input_json: str, options: RunOptions
    ) -> tuple[RunId, Wakeups]:
        """Like :meth:`insert`, for a definition stored already (a schedule's tick): the
        run is inserted from its plan with this client's output limit and
        ``max_signal_wait`` recorded on it (Client Options: Limits and Retention,
        WithMaxSignalWait), and the queue options applied (see
        :func:`cyclone_flow.engine.submit.insert_run`).
        """
        max_wait = self.config.max_signal_wait
        tx = Tx(conn, self.db.q)
        inserted = submit.insert_run(
            tx,
            workflow_id,
            input_json,
            options,
            output_limit=self.config.payload_limits.output_bytes,
            max_signal_wait_s=max_wait if max_wait > 0 else None,
        )
        wakeups = tx.effects.wakeups
        if options.delayed:  # nothing is claimable before run_at: the poll finds it then
            wakeups.queues.clear()
        return RunId(inserted.run_id, duplicate=not inserted.created), wakeups
