"""The typed flow: what the flow-file pipeline (read -> validate -> check -> build)
produces and :mod:`cyclone_flow.flowfile.plan` turns into rows. Pure data, no database.

A :class:`Flow` is immutable. ``document`` is the flow file as plain JSON data (anchors and
merge keys expanded, defaults NOT applied); it is what ``cyclone_workflows.definition``
stores, and ``digest`` (sha256 hex of its canonical JSON) content-addresses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from cyclone_flow._json import JSON as JSON
from cyclone_flow.names import DEFAULT_QUEUE as DEFAULT_QUEUE

NodeType = Literal["action", "fan_out", "child", "wait_signal"]
OnDepFailure = Literal["fail_run", "cancel_branch"]
OnDepSkip = Literal["skip", "run"]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff between attempts; durations in seconds."""

    initial_s: float = 1.0
    max_s: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.1


@dataclass(frozen=True)
class Retry:
    """``retry:`` of a node (after ``defaults``). ``max_attempts`` counts the first attempt."""

    max_attempts: int = 1
    backoff: Backoff = field(default_factory=Backoff)


@dataclass(frozen=True)
class Limit:
    """``concurrency:`` or ``rate_limit:`` of a node (docs/flow-control.md).

    ``group`` names the limit (the flow-file ``group:``, default ``<flow>.<node>``): the
    nodes that share a group share its keys. The key of a step is ``group`` alone when the
    file gives no ``key``, else ``group/VALUE`` with VALUE the run input at ``key_path``
    (a ``${{ run.input... }}`` key; ``()``: the whole input), the output of the ancestor
    ``key_node`` at ``key_path`` (a ``${{ nodes.NAME.output... }}`` key, rendered when the
    step is first claimed), or the literal ``key_value``.
    ``limit`` is a positive count: steps running at once per key (concurrency), or claims
    per window of ``per_s`` seconds per key (rate_limit; ``per_s`` is None for concurrency).
    """

    group: str
    limit: int
    key_path: tuple[str, ...] | None = None
    key_value: str | None = None
    per_s: float | None = None
    key_node: str | None = None


@dataclass(frozen=True)
class Node:
    """One declared node, with the flow's ``defaults`` already applied.

    ``input`` is the JSON template (``None`` when the file gives none: the handler then
    receives the run input). ``options`` holds the type-specific keys as written
    (``over``, ``max_parallel``, ``flow``, ``signal``, ``max_wait``).

    Node types (Engine Design: Why Static DAGs): ``action`` calls ``call`` once;
    ``fan_out`` calls ``call`` once per element of the list ``over`` (one item step each,
    at most ``max_parallel`` at once) and outputs the list of item outputs; ``child``
    runs the flow ``flow`` as a separate child run and outputs its output; ``wait_signal``
    waits for the signal ``signal`` and outputs its payload. ``max_wait`` bounds the
    wait of the last two.
    """

    name: str
    type: NodeType = "action"
    call: str | None = None
    needs: tuple[str, ...] = ()
    input: JSON = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    timeout_s: float | None = None
    retry: Retry = field(default_factory=Retry)
    on_dep_failure: OnDepFailure = "fail_run"
    options: Mapping[str, JSON] = field(default_factory=dict)
    queue_set: bool = False
    """The node names its own ``queue`` (not from ``defaults``): a submission's ``queue``
    does not replace it (Queues and Priority)."""
    priority_set: bool = False
    """The node names its own ``priority``, likewise."""
    max_wait_s: float | None = None
    """``max_wait`` of a child or wait_signal node, in seconds (None: no bound)."""
    when: str | None = None
    """The node's ``when:`` condition as written (a boolean is ``"true"``/``"false"``);
    None: the node always runs (:mod:`cyclone_flow.flowfile.condition`)."""
    on_dep_skip: OnDepSkip = "skip"
    """What the node does when a dependency was skipped: ``skip`` too (the default) or
    ``run`` with that dependency's output as null."""
    concurrency: Limit | None = None
    """``concurrency:`` (after ``defaults``): at most ``limit`` steps per key running."""
    rate_limit: Limit | None = None
    """``rate_limit:`` (after ``defaults``): at most ``limit`` claims per key per window."""
    import_wait_s: float | None = None
    """``import_wait`` (the node's, else ``defaults``', else the flow's), in seconds: how
    long its step may be given back by workers that cannot import (or may not run) its
    call before it is discarded with ``import_error``; None: the engine's default (10m,
    docs/failures.md)."""


@dataclass(frozen=True)
class Flow:
    """A loaded, validated and checked flow; nodes in file order."""

    name: str
    nodes: Mapping[str, Node]
    document: Mapping[str, JSON]
    digest: str
    description: str | None = None
    input_schema: Mapping[str, JSON] | None = None
    path: str | None = None
    deadline_s: float | None = None
    children: Mapping[str, Flow] = field(default_factory=dict)
    """The loaded flow of each ``type: child`` node, by node name."""

    def tree(self) -> list[Flow]:
        """This flow and every child flow below it (depth first, each once)."""
        out: list[Flow] = []
        seen: set[int] = set()
        stack: list[Flow] = [self]
        while stack:
            flow = stack.pop()
            if id(flow) in seen:
                continue
            seen.add(id(flow))
            out.append(flow)
            stack.extend(reversed(list(flow.children.values())))
        return out

    def dependents(self, name: str) -> list[str]:
        """Names of the nodes that list ``name`` in ``needs``, in file order."""
        return [n.name for n in self.nodes.values() if name in n.needs]

    def leaves(self) -> list[str]:
        """Names of the nodes no other node needs, in file order."""
        needed = {d for n in self.nodes.values() for d in n.needs}
        return [name for name in self.nodes if name not in needed]

    # Facts about the nodes the insert path asks at every submission: computed once per
    # Flow (a Flow and its nodes are frozen), none reads anything but the nodes.

    @cached_property
    def has_limits(self) -> bool:
        """Whether a node has ``concurrency:`` or ``rate_limit:``: its runs are written by
        ``engine.submit.insert_run`` (``step_insert_plan`` renders the limit keys), never by
        the one-statement paths ``insert_run_alone`` and ``insert_runs``."""
        return any(
            n.concurrency is not None or n.rate_limit is not None for n in self.nodes.values()
        )

    @cached_property
    def roots_are_actions(self) -> bool:
        """Whether every root node (no needs) is an action without a ``when:``: a new run
        then starts with no node for the engine to start or decide (nothing to release
        after the insert)."""
        return all(
            n.type == "action" and n.when is None for n in self.nodes.values() if not n.needs
        )

    @cached_property
    def _root_actions(self) -> tuple[Node, ...]:
        return tuple(
            n for n in self.nodes.values() if not n.needs and n.type == "action" and n.when is None
        )

    def root_queues(self, queue: str | None = None) -> set[str]:
        """The queues a new run has claimable work in at once: those of its root actions
        without a ``when:``, after a submission's ``queue`` override (a node that sets its
        own queue keeps it). A delayed run has none: the caller checks that."""
        return {n.queue if queue is None or n.queue_set else queue for n in self._root_actions}
