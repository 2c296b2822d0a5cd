"""``cyclone-flow lint`` and ``cyclone-flow graph``: the flow pipeline from the shell.

Exit codes: 0 clean, 1 problems found, 2 usage error (such as a missing path, or a
folder with no flow file in it).
"""

from __future__ import annotations

import json
import os

import click

from cyclone_flow.cli.common import (
    add_import_paths,
    database_options,
    handle_errors,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.errors import FlowError, Problem
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.flowfile.diagram import to_dot, to_mermaid
from cyclone_flow.flowfile.lint import LintPathError, NoFlowFilesError, lint_paths
from cyclone_flow.flowfile.load import load_flow
from cyclone_flow.flowfile.model import Flow

__all__ = ["echo_problems", "format_problems", "graph", "lint", "path_error"]


def _github_escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def format_problems(problems: list[Problem], fmt: str) -> str:
    """Render ``problems`` as ``text`` (one ``FILE:LINE:COL: error[CODE]: message`` a
    line), ``json`` (a list of objects with path, line, col, code, message) or ``github``
    (workflow ``::error`` commands). Returns "" for no problems in text/github formats."""
    if fmt == "json":
        rows = [
            {
                "path": p.path,
                "line": p.line,
                "col": p.col,
                "code": p.code,
                "severity": p.severity,
                "message": p.message,
            }
            for p in problems
        ]
        return json.dumps(rows, indent=2)
    if fmt == "github":
        return "\n".join(
            f"::{p.severity} file={_github_escape(p.path, prop=True)},line={p.line},col={p.col},"
            f"title={p.code}::{_github_escape(p.message)}"
            for p in problems
        )
    return "\n".join(str(p) for p in problems)


@click.command("lint")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github"]),
    default="text",
    show_default=True,
    help="Output format of the problems.",
)
@click.option(
    "--check-imports",
    is_flag=True,
    help="Import each node's call (from the current folder too) and check its signature.",
)
@click.option(
    "--import-path",
    "import_paths",
    multiple=True,
    type=click.Path(file_okay=False),
    help="With --check-imports: also import handlers from this folder (repeatable).",
)
def lint(
    paths: tuple[str, ...], fmt: str, check_imports: bool, import_paths: tuple[str, ...]
) -> None:
    """Check flow files (folders: every *.yaml / *.yml inside) and report every problem.

    Exit status: 0 no problems (or warnings only), 1 errors found, 2 usage error (a
    missing path, a folder without any *.yaml / *.yml file).
    """
    if check_imports:
        add_import_paths(import_paths)  # the current folder first, then each --import-path
    try:
        problems = lint_paths(list(paths), check_imports=check_imports)
    except LintPathError as exc:
        raise path_error(exc) from exc
    if echo_problems(problems, fmt):
        raise SystemExit(1)


def path_error(exc: LintPathError) -> click.BadParameter:
    """The usage error (exit 2) of a PATH argument that :func:`lint_paths` refused: a
    missing path, or a folder without any flow file."""
    if isinstance(exc, NoFlowFilesError):
        return click.BadParameter(
            f"no flow files (*.yaml, *.yml) found in {exc.path!r}.", param_hint="'PATHS...'"
        )
    return click.BadParameter(f"path {exc.path!r} does not exist.", param_hint="'PATHS...'")


def echo_problems(problems: list[Problem], fmt: str) -> bool:
    """Print lint ``problems`` as ``lint`` does: the problems in ``fmt`` on stdout, a
    count (or ``no problems found``) on stderr. Returns whether any is an error."""
    out = format_problems(problems, fmt)
    if out or fmt == "json":
        click.echo(out)
    errors = [p for p in problems if p.severity == "error"]
    warned = len(problems) - len(errors)
    files = len({p.path for p in problems})
    if errors:
        click.echo(f"{len(problems)} problem(s) in {files} file(s)", err=True)
        return True
    if warned:  # warnings only: the flow runs
        click.echo(f"{warned} warning(s) in {files} file(s), no errors", err=True)
        return False
    click.echo("no problems found", err=True)
    return False


@click.command("graph")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "dot"]),
    default="mermaid",
    show_default=True,
    help="Graph language.",
)
@click.option(
    "--run",
    "run_id",
    default=None,
    help="Instead of FILE: the graph of a run (its stored definition), each node with its "
    "state, fan-out item progress, child run or awaited signal.",
)
@database_options
def graph(
    file: str | None, fmt: str, run_id: str | None, database_url: str | None, schema: str
) -> None:
    """Print the dependency graph of a flow file (an invalid file: its problems, exit 1),
    or with --run that of a run with the state of each node."""
    if (file is None) == (run_id is None):
        raise click.UsageError("give a FILE or --run RUN_ID (not both)")
    if run_id is not None:
        flow, notes, states = run_graph(run_id, database_url, schema)
        text = (to_mermaid if fmt == "mermaid" else to_dot)(flow, notes, states)
        click.echo(text, nl=False)
        return
    assert file is not None
    if not os.path.exists(file):
        raise click.BadParameter(f"file {file!r} does not exist.", param_hint="'FILE'")
    try:
        flow = load_flow(file)
    except FlowError as exc:
        click.echo(format_problems(exc.problems, "text"), err=True)
        raise SystemExit(1) from None
    click.echo(to_mermaid(flow) if fmt == "mermaid" else to_dot(flow), nl=False)


@handle_errors
def run_graph(
    run_id: str, database_url: str | None, schema: str
) -> tuple[Flow, dict[str, str], dict[str, str]]:
    """The flow a run was submitted with, a note per node (its state and detail) and the
    state of each node's step."""
    from cyclone_flow.client import Client
    from cyclone_flow.describe import state_word, step_detail

    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        view = client.run_view(client.resolve_run_id(run_id), definition=True)
    run, steps, progress = view.run, view.steps, view.progress
    assert view.definition is not None  # asked for
    definition = dict(view.definition)
    nodes = definition.get("nodes", {})
    # jsonb keeps no key order: show the nodes in file order, which is the steps' order
    definition["nodes"] = {s.node: nodes[s.node] for s in steps if s.node in nodes}
    flow = build_flow(definition)
    notes = {}
    for step in steps:
        detail = step_detail(step, progress, run.rerun_of)
        state = state_word(step.state)
        if detail.startswith(f"{state}:"):
            notes[step.node] = detail  # the detail names the state already
        else:
            notes[step.node] = f"{state}: {detail}" if detail else state
    return flow, notes, {step.node: state_word(step.state) for step in steps}
