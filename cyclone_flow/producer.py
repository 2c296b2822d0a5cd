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


class Producer:
    """Prepares and inserts runs for one client (its database, payload limits and
    ``max_signal_wait``): the one path every submission takes."""

    def __init__(self, db: Database, config: ClientConfig) -> None:
        self.db = db
        self.config = config

    def prepare(self, flow: FlowLike, run_input: JSON) -> tuple[Flow, str]:
        """Load ``flow`` if it is a path (with its child flows), check that every child
        flow is loaded, fill the top-level ``default`` values of its ``input_schema`` into
        ``run_input``, validate and encode it.

        Raises FlowError (a bad flow file, or a ``child`` node whose flow is not loaded:
        E030), InputValidationError, PayloadTooLargeError; nothing is written.
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
        run_input = validate_input(spec.name, spec.input_schema, run_input)
        try:
            text = encode_payload("input", run_input, self.config.payload_limits.input_bytes)
        except Unencodable as exc:
            raise InputValidationError(spec.name, str(exc)) from None
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
