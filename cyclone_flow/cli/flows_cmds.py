"""``cyclone-flow flows list|history|show|diff|rollback|retire``: the deployed flows and
their revisions (docs/deploy.md). Every command has ``--json``; an unknown flow or
revision exits 1, a NAME or REV that cannot be one exits 2.

:func:`parse_flow_ref` reads ``NAME`` / ``NAME@REV`` for ``submit`` too, by the rules of
``Client.submit`` (:data:`cyclone_flow.deployments.FLOW_REFERENCE`,
:func:`cyclone_flow.deployments.parse_flow_reference`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.text import Text

from cyclone_flow.cli.common import (
    REVISION,
    database_options,
    echo_json,
    handle_errors,
    out_console,
    out_table,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.deploy_cmds import plan_line, problem_line
from cyclone_flow.client import Client
from cyclone_flow.db.rows import DeployedFlow, Revision
from cyclone_flow.deployments import FLOW_REFERENCE, parse_flow_reference
from cyclone_flow.errors import CompatibilityError, SubmitOptionError
from cyclone_flow.flowfile.compare import describe_change

__all__ = ["flows_group", "parse_flow_ref"]

_SHORT_SHA = 7


def parse_flow_ref(
    text: str, param_hint: str, *, revision: bool = True, given: int | None = None
) -> tuple[str, int | None]:
    """``NAME`` or ``NAME@REV`` (when ``revision``) as (name, revision or None), read as
    ``Client.submit`` reads it (:data:`~cyclone_flow.deployments.FLOW_REFERENCE`, then
    :func:`~cyclone_flow.deployments.parse_flow_reference`, which checks the bounds);
    ``given``: a revision given apart (``--revision``), which must agree. A click usage
    error (exit 2) naming ``param_hint`` otherwise."""
    if FLOW_REFERENCE.fullmatch(text) is None or ("@" in text and not revision):
        what = "a flow name" + (" or NAME@REVISION" if revision else "")
        raise click.BadParameter(
            f"{text!r} is not {what}: a lowercase letter, then lowercase letters, digits, "
            "'_' or '-'" + (", then @ and a revision number" if revision else ""),
            param_hint=param_hint,
        )
    try:
        return parse_flow_reference(text, given)
    except SubmitOptionError as exc:
        raise click.BadParameter(f"{text!r}: {exc}", param_hint=param_hint) from None


def _name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    return parse_flow_ref(value, "'NAME'", revision=False)[0]


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _client(database_url: str | None, schema: str) -> Client:
    setup_logging()
    url = resolve_database(database_url, existing=True)
    return Client(url, schema=schema, prepare=prepare_enabled())


@click.group("flows")
def flows_group() -> None:
    """Deployed flows and their revisions: list, history, show, diff, rollback, retire."""


def _flow_dict(f: DeployedFlow) -> dict[str, Any]:
    return {
        "name": f.name,
        "current_revision": f.current_revision,
        "kind": f.kind,
        "rollback_of": f.rollback_of,
        "deployed_at": f.deployed_at,
        "deployed_by": f.deployed_by,
        "git_commit": f.git_commit,
        "digest": f.digest,
        "runs_last_day": f.runs_last_day,
        "retired": f.retired_at is not None,
        "retired_at": f.retired_at,
        "retired_by": f.retired_by,
        "updated_at": f.updated_at,
    }


@flows_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def flows_list_cmd(as_json: bool, database_url: str | None, schema: str) -> None:
    """Every deployed flow: its current revision, when, by whom and from which git commit
    it was deployed, its runs of the last day, and whether it is retired."""
    with _client(database_url, schema) as client:
        rows = client.list_deployed_flows()
    if as_json:
        echo_json([_flow_dict(f) for f in rows])
        return
    if not rows:
        click.echo("no deployed flows")
        return
    table = out_table("name", "revision", "deployed (UTC)", "by", "commit", "runs (1d)", "state")
    for f in rows:
        rev = str(f.current_revision)
        if f.kind == "rollback" and f.rollback_of is not None:
            rev += f" (rollback of {f.rollback_of})"
        table.add_row(
            Text(f.name),
            rev,
            _when(f.deployed_at),
            Text(f.deployed_by or "-"),
            (f.git_commit or "-")[:_SHORT_SHA] if f.git_commit else "-",
            "-" if f.runs_last_day is None else str(f.runs_last_day),
            "retired" if f.retired_at is not None else "active",
        )
    out_console().print(table)


def _revision_dict(r: Revision, *, source: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "flow": r.flow_name,
        "revision": r.revision,
        "kind": r.kind,
        "rollback_of": r.rollback_of,
        "deployed_at": r.deployed_at,
        "deployed_by": r.deployed_by,
        "git_commit": r.git_commit,
        "git_path": r.git_path,
        "git_dirty": r.git_dirty,
        "source_path": r.source_path,
        "digest": r.digest,
        "current": r.current,
        "retired_at": r.retired_at,
    }
    if r.runs is not None:
        data["runs"] = r.runs
    if source:
        data["source"] = r.source
        data["definition"] = r.definition
    return data


@flows_group.command("history")
@click.argument("name", callback=_name)
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def flows_history_cmd(name: str, as_json: bool, database_url: str | None, schema: str) -> None:
    """The revisions of flow NAME, newest first: kind (a rollback names the revision it
    restored), when, by whom, git commit and path (dirty: the file differed from the
    commit), runs, and which is current."""
    with _client(database_url, schema) as client:
        rows = client.flow_history(name)
    if as_json:
        echo_json([_revision_dict(r) for r in rows])
        return
    table = out_table("", "revision", "kind", "deployed (UTC)", "by", "git", "runs")
    for r in rows:
        kind = f"rollback of {r.rollback_of}" if r.kind == "rollback" else r.kind
        git = "-"
        if r.git_commit is not None:
            git = f"{r.git_commit[:_SHORT_SHA]} {r.git_path or ''}".rstrip()
            if r.git_dirty:
                git += " (dirty)"
        elif r.source_path:
            git = f"- {r.source_path}"
        table.add_row(
            "*" if r.current else "",
            str(r.revision),
            kind,
            _when(r.deployed_at),
            Text(r.deployed_by),
            Text(git),
            "-" if r.runs is None else str(r.runs),
        )
    console = out_console()
    console.print(table)
    if rows and rows[0].retired_at is not None:
        console.print(Text(f"retired since {_when(rows[0].retired_at)} UTC"))


@flows_group.command("show")
@click.argument("ref", metavar="NAME[@REV]")
@click.option("--json", "as_json", is_flag=True, help="The revision's fields and source.")
@database_options
@handle_errors
def flows_show_cmd(ref: str, as_json: bool, database_url: str | None, schema: str) -> None:
    """Print the YAML source of flow NAME's current revision (or revision REV) exactly as
    it was deployed, comments kept: `flows show x > x.yaml` gives the file back."""
    name, rev = parse_flow_ref(ref, "'NAME[@REV]'")
    with _client(database_url, schema) as client:
        revision = client.get_revision(name, rev)
    if as_json:
        echo_json(_revision_dict(revision, source=True))
        return
    sys.stdout.flush()
    sys.stdout.buffer.write((revision.source or "").encode("utf-8"))
    sys.stdout.buffer.flush()


@flows_group.command("diff")
@click.argument("name", callback=_name)
@click.argument("rev_a", type=REVISION, metavar="REV_A")
@click.argument("rev_b", type=REVISION, metavar="[REV_B]", required=False)
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def flows_diff_cmd(
    name: str,
    rev_a: int,
    rev_b: int | None,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """The unified diff of the sources of revisions REV_A and REV_B (default: the current
    one) of flow NAME, then the node-level changes."""
    with _client(database_url, schema) as client:
        diff = client.diff_revisions(name, rev_a, rev_b)
    if as_json:
        echo_json(diff.to_json())
        return
    if diff.source_diff:
        click.echo(diff.source_diff, nl=False)
    lines = describe_change(diff.change)
    if not lines:
        click.echo(f"{name}: revisions {diff.old} and {diff.new} are the same")
        return
    click.echo(f"{name}: revision {diff.old} -> {diff.new}")
    for line in lines:
        click.echo(f"  {line}")


@flows_group.command("rollback")
@click.argument("name", callback=_name)
@click.option("--to", "to", type=REVISION, required=True, help="The revision to put back.")
@click.option("--by", default=None, help="Who rolls back (default: the OS user).")
@click.option(
    "--force",
    is_flag=True,
    help="Roll back even when stored inputs (schedules, waiting runs) fail its input_schema.",
)
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def flows_rollback_cmd(
    name: str,
    to: int,
    by: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    database_url: str | None,
    schema: str,
) -> None:
    """Make revision --to of flow NAME current again: a new revision with its source and
    definition (recorded as a rollback), its schedules synced back from that source."""
    with _client(database_url, schema) as client:
        try:
            plan = client.rollback(name, to, by=by, force=force, dry_run=dry_run)
        except CompatibilityError as exc:
            if as_json:
                echo_json({**exc.result.to_json(), "error": "compatibility"})
            for problem in exc.problems:
                click.echo(f"error: {name}: {problem_line(problem)}", err=True)
            click.echo(
                "error: nothing rolled back: fix those inputs, or roll back anyway with --force",
                err=True,
            )
            sys.exit(1)
    if as_json:
        echo_json(plan.to_json())
        return
    click.echo(plan_line(plan, applied=not dry_run))
    if dry_run:
        click.echo("dry run: nothing was written", err=True)


@flows_group.command("retire")
@click.argument("name", callback=_name)
@click.option("--by", default=None, help="Who retires it (default: the OS user).")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def flows_retire_cmd(
    name: str, by: str | None, as_json: bool, database_url: str | None, schema: str
) -> None:
    """Retire flow NAME: its schedules are paused, running runs finish, and new submits
    by name are refused (`submit NAME`, Client.submit("NAME")), as is the CLI's `submit
    FILE` of a file declaring that name (checked before the insert, not in its
    transaction). Client.submit of a Flow or a path, and `run FILE`, do not check.
    Deploying NAME again makes it active for submits by name, but its schedules stay
    paused: resume each with `cyclone-flow schedule resume SCHEDULE`."""
    with _client(database_url, schema) as client:
        result = client.retire(name, by=by)
    if as_json:
        echo_json({"name": result.name, "retired": result.retired, "paused": list(result.paused)})
        return
    if not result.retired:
        click.echo(f"{name} was already retired")
        return
    paused = f"; paused schedule(s) {', '.join(result.paused)}" if result.paused else ""
    click.echo(
        f"retired {name}: submits by name, and the CLI's submits of its files, are refused{paused}"
    )
