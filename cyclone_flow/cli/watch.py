"""``cyclone-flow status RUN --watch``: one run followed until it ends.

On a terminal, :func:`watch_run` redraws a tree (rich ``Live``) every ``interval``
seconds from one view of the run (:meth:`Client.run_view
<cyclone_flow.Client.run_view>`: one snapshot per redraw): the run, then one line per
node with its state, attempt, how long it ran (or has been running), its node-type
detail (a fan-out node's item summary, the child run, the awaited signal) and, for a
step that is neither running nor finished, why it waits (as ``status`` says it, in the
words of :mod:`cyclone_flow.describe`). With ``items``, a fan-out node's item steps hang
below it. Elsewhere (stdout a pipe or a file) it prints first each waiting step and why
(``waiting: NODE: REASON``, as ``status`` does), then the plain lines of
:class:`~cyclone_flow.cli.progress.PlainLines` as things change, in the order they
happened, so a CI log gets no redraws. Either way it returns the final run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.text import Text
from rich.tree import Tree

from cyclone_flow.cli.progress import Waiter, end_line, follow_plain, logs_above
from cyclone_flow.db.rows import Run, Step
from cyclone_flow.describe import (
    NO_ATTEMPT,
    describe_attempt,
    state_word,
    step_detail,
    step_error,
    step_took,
    wait_line,
    wait_text,
)
from cyclone_flow.explain import Waiting, WaitReason

if TYPE_CHECKING:
    from cyclone_flow.client import Client

__all__ = ["node_line", "render_tree", "watch_run"]

_STYLE = {
    "completed": "green",
    "running": "cyan",
    "failed": "red",
    "discarded": "red",
    "cancelled": "yellow",
    "waiting": "magenta",
    "skipped": "dim",
}


def watch_run(
    client: Client, run_id: str, console: Console, *, interval: float, items: bool
) -> Run:
    """Follow run ``run_id`` (a full id) on ``console`` until it is terminal and return
    it: a live tree on a terminal, plain lines of changes otherwise (see the module
    docstring). Database outages are ridden out as ``run`` does; ``KeyboardInterrupt``
    propagates once the display is closed. Raises RunNotFoundError."""
    waiter = Waiter(client, run_id, interval, None)
    if console.is_terminal:
        return _watch_live(client, run_id, console, waiter, items)
    return _watch_plain(client, run_id, console, waiter, items)


def _watch_plain(client: Client, run_id: str, console: Console, waiter: Waiter, items: bool) -> Run:
    # first where it stands: each waiting step and why, as `status` says it (the lines
    # of changes follow; a run that has ended gets only those)
    view = waiter.ride(lambda: client.run_view(run_id, items=items))
    if not view.run.state.terminal:
        for node, why in view.waiting.items():
            console.print(wait_line(node, why), markup=False, highlight=False, soft_wrap=True)
    run = follow_plain(client, run_id, console, waiter)
    console.print(end_line(run), markup=False, highlight=False, soft_wrap=True)
    return run


def _watch_live(client: Client, run_id: str, console: Console, waiter: Waiter, items: bool) -> Run:
    def snapshot() -> Tree:
        view = client.run_view(run_id, items=items)  # one snapshot: one moment per redraw
        return render_tree(view.run, view.steps, view.progress, view.waiting, view.now)

    with logs_above(console), Live(console=console, auto_refresh=False) as live:
        while True:
            run = waiter.next()
            live.update(waiter.ride(snapshot), refresh=True)
            if run.state.terminal:
                return run


def render_tree(
    run: Run,
    steps: Sequence[Step],
    progress: Mapping[str, Mapping[str, int]],
    waiting: Mapping[str, Waiting],
    now: datetime,
) -> Tree:
    """The tree ``status --watch`` draws: the run (id, flow, state, its error once it
    ended) with one branch per node (:func:`node_line`; a waiting step's reason below it),
    and the item steps in ``steps`` below their fan-out node."""
    head = Text.assemble(
        f"run {run.id}  flow {run.flow_name}  ",
        (state_word(run.state), f"bold {_style(run.state)}"),
    )
    if run.error and run.state.terminal:
        head.append(f"  {run.error}")
    tree = Tree(head)
    branches: dict[str, Tree] = {}
    for step in steps:
        parent = branches.get(step.parent_node, tree) if step.parent_node else tree
        why = waiting.get(step.node)
        # the reason of a node waiting on its signal, child run or items says what its
        # node-type detail would: shown once, below the node
        said = why is not None and why.reason in _SAID_BELOW
        branch = parent.add(node_line(step, progress, now, detail=not said, rerun_of=run.rerun_of))
        if step.parent_node is None:
            branches[step.node] = branch
        if why is not None:
            # (a limit's reason says "waiting: …" itself: said once, as status does)
            branch.add(Text(f"waiting: {wait_text(why)}", style="dim"))
    return tree


def node_line(
    step: Step,
    progress: Mapping[str, Mapping[str, int]],
    now: datetime,
    *,
    detail: bool = True,
    rerun_of: str | None = None,
) -> Text:
    """One node of the tree: ``NODE  STATE  attempt N/M  DURATION  DETAIL  [KIND] ERROR``
    (no attempt for a step never claimed; the duration of a running step so far, the
    node-type detail unless ``detail`` is False, with ``rerun_of`` the run a reused step
    comes from; the error of a step that did not complete)."""
    line = Text.assemble((step.node, "bold"), "  ", (state_word(step.state), _style(step.state)))
    attempt = describe_attempt(step.attempt, step.max_attempts, step.lease_generation)
    if attempt != NO_ATTEMPT:  # a step never claimed had no attempt: none shown
        line.append(f"  attempt {attempt}")
    took = step_took(step, now)
    if took:
        line.append(f"  {took}")
    shown = step_detail(step, progress, rerun_of) if detail and step.parent_node is None else ""
    if shown:
        line.append(f"  {shown}")
    if error := step_error(step):
        line.append(f"  {error}", style="red")
    return line


_SAID_BELOW = frozenset((WaitReason.SIGNAL, WaitReason.CHILD_RUN, WaitReason.FAN_OUT))


def _style(state: str) -> str:
    return _STYLE.get(str(state), "")
