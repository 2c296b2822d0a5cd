"""Deprecated (one release): the insert path is :mod:`cyclone_flow.inserter`.

``Producer`` is :class:`~cyclone_flow.inserter.Inserter`, ``RunPlan`` is
:class:`~cyclone_flow.inserter.RunPreview` and ``plan_run`` is
:func:`~cyclone_flow.inserter.preview_run`; this module re-exports them under their old
names and warns (DeprecationWarning) when it is first imported.
"""

from __future__ import annotations

import warnings

from cyclone_flow._json import JSON
from cyclone_flow.flowfile.model import Flow
from cyclone_flow.inserter import (
    CACHE_ENTRIES,
    DefinitionKey,
    FlowLike,
    Inserter,
    PlannedStep,
    RunId,
    RunPreview,
    check_flow,
    encode_input,
    prepare_run,
    preview_run,
)

__all__ = [
    "CACHE_ENTRIES",
    "DefinitionKey",
    "FlowLike",
    "PlannedStep",
    "Producer",
    "RunId",
    "RunPlan",
    "check_flow",
    "encode_input",
    "plan_run",
    "prepare_run",
]


class Producer(Inserter):
    """Deprecated name of :class:`~cyclone_flow.inserter.Inserter` (one release); its
    ``prepare_input`` also takes the flow by its old keyword ``spec`` (with a warning)."""

    def prepare_input(
        self, flow: Flow | None = None, run_input: JSON = None, *, spec: Flow | None = None
    ) -> str:
        if spec is not None:
            warnings.warn(
                "Producer.prepare_input(spec=...) is deprecated: pass flow=",
                DeprecationWarning,
                stacklevel=2,
            )
            flow = spec
        if flow is None:
            raise TypeError("prepare_input() needs the flow")
        return super().prepare_input(flow, run_input)


RunPlan = RunPreview
plan_run = preview_run

warnings.warn(
    "cyclone_flow.producer is deprecated: import from cyclone_flow.inserter "
    "(Producer is Inserter, RunPlan is RunPreview, plan_run is preview_run)",
    DeprecationWarning,
    stacklevel=2,
)
