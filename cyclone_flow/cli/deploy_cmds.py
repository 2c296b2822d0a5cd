"""``cyclone-flow deploy`` and ``cyclone-flow diff``: flow files from version control become
revisions (docs/deploy.md), and what a deploy would change, for review.

``diff`` exits 0 when nothing would change, 1 when something would (a CI gate, as ``git
diff --exit-code``), 2 on errors (a missing path, lint errors, no database). ``deploy``
exits 0 when deployed (or up to date), 1 on lint errors or compatibility problems
(nothing deployed), 2 on usage errors. The text, JSON and GitHub Markdown forms of a
:class:`~cyclone_flow.deployments.DeployResult` are here; ``flows rollback`` prints a
plan's line with :func:`plan_line`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from cyclone_flow.cli.common import (
    database_options,
    echo_json,
    handle_errors,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.lint_cmds import echo_problems, path_error
from cyclone_flow.client import Client
from cyclone_flow.deployments import CompatProblem, DeployResult, FlowPlan
from cyclone_flow.errors import CompatibilityError, DeployLintError, LintPathError
from cyclone_flow.flowfile.compare import describe_change

__all__ = ["deploy_cmd", "diff_cmd", "plan_line", "problem_line"]

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("text", "json", "github")

RETIRED_SCHEDULES = (
    "the schedules its retirement paused stay paused "
    "(resume each: cyclone-flow schedule resume SCHEDULE)"
)
"""What deploying a retired flow does not do: resume the schedules the retire paused."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _names(names: Sequence[str]) -> str:
    return ", ".join(names)


def _schedule_parts(plan: FlowPlan) -> list[str]:
    """``schedule nightly-daily updated``, ``schedules a, b added`` ... of a plan."""
    parts = []
    for label, names in (
        ("added", plan.schedules.added),
        ("updated", plan.schedules.updated),
        ("removed", plan.schedules.removed),
    ):
        if names:
            word = "schedule" if len(names) == 1 else "schedules"
            parts.append(f"{word} {_names(names)} {label}")
    return parts


def _change_parts(plan: FlowPlan) -> list[str]:
    """What changed, in a few words: node counts, flow fields, schedules."""
    change = plan.change
    parts = []
    if plan.status == "added":
        parts.append(_plural(len(change.nodes_added), "node"))
    else:
        for items, label in (
            (change.nodes_added, "added"),
            (change.nodes_removed, "removed"),
            (change.nodes_changed, "changed"),
        ):
            if items:
                parts.append(f"{_plural(len(items), 'node')} {label}")
        parts.extend(f"{f.field} changed" for f in change.flow_fields)
    parts.extend(_schedule_parts(plan))
    if not parts and plan.status == "changed" and plan.source_diff:
        parts.append("source text changed, same definition")
    return parts


def plan_line(plan: FlowPlan, *, applied: bool = True) -> str:
    """One line for a flow of a deploy or rollback: ``deployed nightly revision 3 (was 2):
    2 nodes changed, schedule nightly-daily updated``, ``nightly: up to date (revision
    2)``, ``retired old-flow (pruned)``; ``would ...`` when not ``applied``."""
    would = "" if applied else "would "
    if plan.status == "unchanged":
        return f"{plan.name}: up to date (revision {plan.revision})"
    if plan.status == "removed":
        verb = "retire" if not applied else "retired"
        tail = "; ".join(_schedule_parts(plan))
        return f"{would}{verb} {plan.name} (pruned)" + (f": {tail}" if tail else "")
    if plan.kind == "rollback":
        verb = "roll back" if not applied else "rolled back"
        head = (
            f"{would}{verb} {plan.name} to revision {plan.rollback_of} as revision "
            f"{plan.revision} (was {plan.previous})"
        )
    else:
        verb = "deploy" if not applied else "deployed"
        was = "new" if plan.previous is None else f"was {plan.previous}"
        head = f"{would}{verb} {plan.name} revision {plan.revision} ({was})"
    parts = _change_parts(plan) if plan.kind == "deploy" else _schedule_parts(plan)
    line = head + (f": {', '.join(parts)}" if parts else "")
    if plan.was_retired:
        line += f"; it was retired and is active again: {RETIRED_SCHEDULES}"
    if plan.problems:
        line += f"; forced past {_plural(len(plan.problems), 'compatibility problem')}"
    return line


def problem_line(problem: CompatProblem) -> str:
    """``schedule nightly-daily: its stored input fails the new input_schema: MESSAGE``."""
    what = "schedule" if problem.kind == "schedule" else "waiting run"
    return f"{what} {problem.name}: its stored input fails the new input_schema: {problem.message}"


def _status_head(plan: FlowPlan) -> str:
    if plan.status == "unchanged":
        return f"unchanged (revision {plan.revision})"
    if plan.status == "removed":
        return f"removed: would be retired (current revision {plan.previous})"
    if plan.status == "added":
        return f"added (revision {plan.revision})"
    return f"changed (revision {plan.previous} -> {plan.revision})"


def _where(plan: FlowPlan) -> str:
    """``flows/a.yaml (git abc1234, dirty)`` or ``""``."""
    if plan.path is None:
        return ""
    text = plan.path
    if plan.git is not None:
        dirty = ", dirty" if plan.git.dirty else ""
        text += f" (git {plan.git.commit[:7]}{dirty})"
    return text


def _schema_line(plan: FlowPlan) -> str | None:
    """The input-schema compatibility of a changed flow (None: its schema did not change,
    or only in annotations). ``compatible`` is claimed only when every change is known
    not to refuse an input the old schema accepted (a constraint removed or loosened, a
    type widened, ...: :func:`~cyclone_flow.flowfile.compare.schema_changes`); any other
    change is ``breaking``, and the compatibility check then says whether a stored input
    fails it."""
    changes = plan.change.schema
    if not changes:
        return None
    if all(not c.breaking for c in changes):
        return "input schema: compatible (inputs the old schema accepted still pass)"
    count = len(plan.problems)
    stored = (
        f"{_plural(count, 'stored input')} {'fails' if count == 1 else 'fail'} it"
        if count
        else "no stored input fails it"
    )
    return f"input schema: breaking ({stored})"


def _plan_facts(plan: FlowPlan) -> list[str]:
    """The lines under a flow's heading: node-level changes, schedules, schema, problems."""
    lines = list(describe_change(plan.change))
    parts = [
        f"{label} {_names(names)}"
        for label, names in (
            ("added", plan.schedules.added),
            ("updated", plan.schedules.updated),
            ("removed", plan.schedules.removed),
        )
        if names
    ]
    if parts:
        lines.append("schedules: " + "; ".join(parts))
    if plan.was_retired:
        lines.append(f"retired now: deploying makes it active again; {RETIRED_SCHEDULES}")
    schema = _schema_line(plan)
    if schema is not None:
        lines.append(schema)
    lines.extend(f"! {problem_line(p)}" for p in plan.problems)
    return lines


def _summary(result: DeployResult) -> str:
    counts: dict[str, int] = {}
    for plan in result.flows:
        counts[plan.status] = counts.get(plan.status, 0) + 1
    moving = [f"{counts[s]} {s}" for s in ("added", "changed", "removed") if counts.get(s)]
    tail = f"{counts['unchanged']} unchanged" if counts.get("unchanged") else ""
    if not moving:
        return f"no changes ({tail})" if tail else "no changes"
    changing = sum(counts.get(s, 0) for s in ("added", "changed", "removed"))
    head = f"{_plural(changing, 'flow')} would change ({', '.join(moving)})"
    return f"{head}, {tail}" if tail else head


def text_diff(result: DeployResult) -> str:
    """The text form of ``diff`` (and ``deploy --dry-run``): per flow a heading line and
    its changes indented, then a summary line."""
    out: list[str] = []
    for plan in result.flows:
        where = _where(plan) if plan.status != "unchanged" else ""
        out.append(f"{plan.name}: {_status_head(plan)}" + (f"  {where}" if where else ""))
        out.extend(f"  {line}" for line in _plan_facts(plan))
    out.append(_summary(result))
    return "\n".join(out)


def _code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(text: str, lang: str) -> str:
    """``text`` in a fenced block longer than any backtick run it holds."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def github_diff(result: DeployResult, title: str) -> str:
    """Markdown for a pull-request comment: a summary, a heading per flow that changes with
    a bullet list of its changes and its source diff folded in ``<details>``, and the
    unchanged flows in one line."""
    out = [f"## {title}", "", f"**{_summary(result)}**"]
    unchanged = []
    for plan in result.flows:
        if plan.status == "unchanged":
            unchanged.append(f"{_code(plan.name)} (revision {plan.revision})")
            continue
        out += ["", f"### {_code(plan.name)}: {_status_head(plan)}"]
        if where := _where(plan):
            out += ["", _code(where)]
        out.append("")
        for line in _plan_facts(plan):
            mark = ":x: " if line.startswith("! ") else ""
            out.append(f"- {mark}{_code(line)}")
        if plan.source_diff:
            out += [
                "",
                "<details><summary>source diff</summary>",
                "",
                _fenced(plan.source_diff, "diff"),
                "",
                "</details>",
            ]
    if unchanged:
        out += ["", "Unchanged: " + ", ".join(unchanged)]
    return "\n".join(out)


def _echo_result(result: DeployResult, fmt: str, title: str) -> None:
    if fmt == "json":
        echo_json(result.to_json())
    elif fmt == "github":
        click.echo(github_diff(result, title))
    else:
        click.echo(text_diff(result))


def _format_option(func: F) -> F:
    func = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="The same as --format json.",
    )(func)
    func = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        help="Output format: text (default), json, or github (Markdown for a pull-request "
        "comment); lint problems are printed in it too.",
    )(func)
    return func


def _fmt(fmt: str | None, as_json: bool) -> str:
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json and --format {fmt} disagree: give one")
    return "json" if as_json else (fmt or "text")


def _lint_failed(exc: DeployLintError, fmt: str, code: int) -> SystemExit:
    echo_problems(list(exc.problems), fmt)
    return SystemExit(code)


@click.command("diff")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--prune",
    is_flag=True,
    help="Also list the deployed flows absent from PATHS (deploy --prune retires them).",
)
@_format_option
@database_options
def diff_cmd(
    paths: tuple[str, ...],
    prune: bool,
    fmt: str | None,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Show what `deploy PATHS` would change, per flow: added, changed, removed or
    unchanged; the nodes added, removed and changed; the schedules; the input schema's
    compatibility with the stored inputs that would use it. Read-only: takes no lock and
    writes nothing (SELECT rights suffice).

    Exit status: 0 nothing would change, 1 something would, 2 errors (a missing path,
    lint errors: their problems are printed, no database).
    """
    shown = _fmt(fmt, as_json)
    try:
        result = _diff(list(paths), prune, shown, database_url, schema)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise SystemExit(2) from None  # every error of diff exits 2: 1 means "changes"
        raise
    _echo_result(result, shown, "cyclone-flow diff")
    sys.exit(1 if result.changed else 0)


@handle_errors
def _diff(
    paths: list[str], prune: bool, fmt: str, database_url: str | None, schema: str
) -> DeployResult:
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        try:
            return client.diff(paths, prune=prune)
        except LintPathError as exc:
            raise path_error(exc) from exc
        except DeployLintError as exc:
            raise _lint_failed(exc, fmt, 2) from None


@click.command("deploy")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--by", default=None, help="Who deploys (default: the OS user).")
@click.option(
    "--prune",
    is_flag=True,
    help="Retire every deployed flow of the schema absent from PATHS (so PATHS must be all "
    "the flows deployed to it), removing its file schedules and pausing its others.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Deploy even when stored inputs (schedules, waiting runs) fail a new input_schema.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what `diff` prints; write nothing.",
)
@_format_option
@database_options
@handle_errors
def deploy_cmd(
    paths: tuple[str, ...],
    by: str | None,
    prune: bool,
    force: bool,
    dry_run: bool,
    fmt: str | None,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Lint PATHS (files or folders), then store each flow whose content changed as a new
    revision and sync its `schedules:`, all flows in one transaction (all or none).

    Exit status: 0 deployed or up to date; 1 lint errors (printed as `lint` prints them)
    or stored inputs the new input_schema refuses (each named, unless --force): nothing
    deployed; 2 usage error (a missing path).
    """
    shown = _fmt(fmt, as_json)
    setup_logging()
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        try:
            result = client.deploy(list(paths), by=by, prune=prune, force=force, dry_run=dry_run)
        except LintPathError as exc:
            raise path_error(exc) from exc
        except DeployLintError as exc:
            raise _lint_failed(exc, shown, 1) from None
        except CompatibilityError as exc:
            _refused(exc, shown)
    if dry_run:
        _echo_result(result, shown, "cyclone-flow deploy --dry-run")
        click.echo("dry run: nothing was written", err=True)
        return
    if shown != "text":
        _echo_result(result, shown, "cyclone-flow deploy")
        return
    for plan in result.flows:
        click.echo(plan_line(plan))


def _refused(exc: CompatibilityError, fmt: str) -> None:
    """Print the compatibility problems that stopped a deploy (each naming its flow and
    the schedule or run) and exit 1."""
    if fmt == "json":
        echo_json({**exc.result.to_json(), "error": "compatibility"})
    for plan in exc.result.flows:
        for problem in plan.problems:
            click.echo(f"error: {plan.name}: {problem_line(problem)}", err=True)
    count = len(exc.problems)
    click.echo(
        f"error: nothing deployed: {_plural(count, 'stored input')} would fail the new "
        "input_schema; fix the schedule's input (or wait for the runs), change the schema "
        "(a default for a new required field), or deploy anyway with --force",
        err=True,
    )
    sys.exit(1)
