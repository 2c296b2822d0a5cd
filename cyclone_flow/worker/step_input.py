"""A claimed step's input: its node's input template rendered against the run input and
the outputs of upstream nodes, each read through the client's output cache
(:class:`cyclone_flow.worker.cache.OutputCache`) and decoded afresh for every caller
(handlers may mutate what they get)."""

from __future__ import annotations

import json
from collections.abc import Callable

from cyclone_flow._json import JSON
from cyclone_flow.db import runs, steps
from cyclone_flow.db.conn import Database
from cyclone_flow.db.rows import ClaimedStep
from cyclone_flow.errors import RunNotFoundError, TemplateError
from cyclone_flow.flowfile.template import SKIPPED, references, render
from cyclone_flow.states import StepState
from cyclone_flow.worker.cache import OutputCache

__all__ = ["Inputs"]

_SKIPPED_TEXT = ""
"""The cached text of a skipped node's output (never valid JSON, so never a real one)."""


class Inputs:
    """Reads run inputs and node outputs through ``cache`` (one statement in autocommit
    on a miss); shared by all worker threads of a client."""

    def __init__(self, db: Database, cache: OutputCache) -> None:
        self.db = db
        self.cache = cache

    def _cached_text(
        self, key: tuple[str, str | None], fetch: Callable[[], str | None]
    ) -> str | None:
        hit, text = self.cache.get(key)
        if hit:
            return str(text)
        text = fetch()
        if text is not None:
            self.cache.put(key, text, len(text.encode("utf-8")))
        return text

    def upstream_output(self, run_id: str, node: str) -> JSON:
        """Output of ``(run_id, node)`` through the LRU cache, decoded afresh for each
        caller (handlers may mutate what they get); None for a skipped node; ``KeyError``
        if not completed."""
        output = self._upstream(run_id, node)
        return None if output is SKIPPED else output

    def _upstream(self, run_id: str, node: str) -> JSON:
        """:meth:`upstream_output`, with :data:`SKIPPED` for a skipped node."""
        text = self._cached_text((run_id, node), lambda: self._output_text(run_id, node))
        if text is None:
            raise KeyError(f"node {node!r} of run {run_id} has not completed")
        if text == _SKIPPED_TEXT:
            return SKIPPED
        return json.loads(text)

    def run_input(self, run_id: str, prefetched: str | None = None) -> JSON:
        """The run's input through the same cache (key ``(run_id, None)``), decoded afresh;
        ``prefetched``: its JSON text as the claim returned it (no read, no cache entry)."""
        if prefetched is not None:
            return json.loads(prefetched)
        text = self._cached_text((run_id, None), lambda: self._run_input_text(run_id))
        return json.loads(text or "null")

    def _output_text(self, run_id: str, node: str) -> str | None:
        """The output of ``(run_id, node)`` as JSON text when that node completed, ``""``
        when it was skipped, else None (one statement in autocommit)."""
        with self.db.autocommit_session() as s:
            row = steps.step_get_output(s, run_id=run_id, node=node)
        if row is not None and row.state == StepState.SKIPPED:
            return _SKIPPED_TEXT
        if row is None or row.state != StepState.COMPLETED:
            return None
        return row.output

    def _run_input_text(self, run_id: str) -> str:
        """The input of a run as JSON text (one statement in autocommit); raises
        RunNotFoundError."""
        with self.db.autocommit_session() as s:
            text = runs.run_get_input(s, run_id=run_id)
        if text is None:
            raise RunNotFoundError(run_id)
        return text

    def resolve_input(self, step: ClaimedStep) -> JSON:
        """Render the node's input template; no template means the run input (for a
        fan-out item: its list element, which ``${{ item }}`` names in a template).
        Raises TemplateError for a reference to a node that has not completed."""
        if step.input is None:
            if step.parent_node is not None:
                return step.item
            return self.run_input(step.run_id, step.run_input_text)
        needs_run = any(ref.kind == "run" for ref in references(step.input))
        run_input = self.run_input(step.run_id, step.run_input_text) if needs_run else None

        def upstream(node: str) -> JSON:
            try:
                return self._upstream(step.run_id, node)
            except KeyError as exc:
                raise TemplateError(str(exc.args[0])) from None

        return render(step.input, run_input, upstream, step.item)
