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
from collections.abc import Mapping
from typing import Any

import jsonschema

from cyclone_flow.config import ClientConfig
from cyclone_flow.errors import InputValidationError, PayloadTooLargeError, UnsupportedNodeTypeError
from cyclone_flow.options import RunOptions, apply_overrides
from cyclone_flow.spec import load_flow
from cyclone_flow.spec.model import JSON, Flow
from cyclone_flow.store.store import Conn, Store, Wakeups, contains_nul, dumps

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
    """Prepares and inserts runs for one client (its store and payload limits)."""

    def __init__(self, store: Store, config: ClientConfig) -> None:
        self.store = store
        self.config = config

    def prepare(self, flow: FlowLike, run_input: JSON) -> tuple[Flow, str]:
        """Load ``flow`` if it is a path, refuse reserved node types, fill the top-level
        ``default`` values of its ``input_schema`` into ``run_input``, validate and encode it.

        Raises FlowError, UnsupportedNodeTypeError, InputValidationError,
        PayloadTooLargeError; nothing is written.
        """
        spec = flow if isinstance(flow, Flow) else load_flow(flow)
        for node in spec.nodes.values():
            if node.type != "action":
                raise UnsupportedNodeTypeError(spec.name, node.name, node.type)
        if spec.input_schema is not None:
            run_input = apply_input_defaults(spec.input_schema, run_input)
            validator = jsonschema.Draft202012Validator(spec.input_schema)
            error = jsonschema.exceptions.best_match(validator.iter_errors(run_input))
            if error is not None:
                path = "/".join(str(p) for p in error.absolute_path)
                raise InputValidationError(spec.name, error.message, path)
        try:
            text = dumps(run_input)
        except (TypeError, ValueError) as exc:
            raise InputValidationError(spec.name, f"input is not JSON: {exc}") from None
        if contains_nul(run_input):
            raise InputValidationError(
                spec.name, "input contains a NUL character (U+0000), which Postgres cannot store"
            )
        size = len(text.encode("utf-8"))
        if size > self.config.payload_limits.input_bytes:
            raise PayloadTooLargeError("input", size, self.config.payload_limits.input_bytes)
        return spec, text

    def insert(
        self, conn: Conn, flow: Flow, input_json: str, options: RunOptions
    ) -> tuple[RunId, Wakeups]:
        """Insert a prepared run with ``options`` in the caller's transaction on ``conn``;
        return its id and the wakeups to publish after the commit (none for a duplicate,
        a held run of a sequence, or a delayed run)."""
        spec = apply_overrides(flow, options)
        inserted = self.store.insert_queued_run(conn, spec, input_json, options)
        wakeups = Wakeups()
        if inserted.created and not inserted.held and not options.delayed:
            wakeups.queues.update(n.queue for n in spec.nodes.values() if not n.needs)
        return RunId(inserted.run_id, duplicate=not inserted.created), wakeups


def apply_input_defaults(schema: Mapping[str, Any], value: JSON) -> JSON:
    """Fill top-level ``properties.*.default`` of an object input schema (None input
    counts as ``{}`` when the schema is an object schema)."""
    props = schema.get("properties")
    if schema.get("type") != "object" or not isinstance(props, Mapping):
        return value
    if value is None:
        value = {}
    if not isinstance(value, dict):
        return value
    filled = dict(value)
    for key, sub in props.items():
        if key not in filled and isinstance(sub, Mapping) and "default" in sub:
            filled[key] = sub["default"]
    return filled
