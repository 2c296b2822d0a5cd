"""What every database command of the CLI shares: the database and schema options, the
one stderr line that says which database is used, logging, and turning errors into exit
codes (1 for a problem with input or state, 2 for a usage mistake) without a traceback."""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import shlex
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import psycopg
import psycopg_pool
from click.core import ParameterSource
from rich.console import Console, RenderableType
from rich.table import Table

from cyclone_flow.config import PayloadLimits
from cyclone_flow.durations import DurationError, check_seconds, parse_duration_arg
from cyclone_flow.errors import ConfigError, CycloneError, FlowError
from cyclone_flow.flowfile.model import JSON
from cyclone_flow.logs import TextFormatter, debug_requested
from cyclone_flow.names import validate_schema_name

F = TypeVar("F", bound=Callable[..., Any])


_PREPARE = "cyclone_flow.prepare"  # click context meta: --prepare/--no-prepare

MAX_REVISION = 2**31 - 1
"""The largest revision number (a Postgres ``integer``, as the revision columns): a
larger one given on the command line is a usage error, not a database error."""

REVISION = click.IntRange(1, MAX_REVISION)
"""The click type of every revision given as an option or argument (``--revision``,
``--to``, ``flows diff NAME A B``)."""


def database_options(func: F) -> F:
    """Add ``--database-url`` (``CYCLONE_DATABASE_URL``), ``--schema``
    (``CYCLONE_SCHEMA``, default ``public``) and ``--prepare/--no-prepare``
    (``CYCLONE_PREPARE``, default on; read with :func:`prepare_enabled`)."""
    func = click.option(
        "--prepare/--no-prepare",
        envvar="CYCLONE_PREPARE",
        default=True,
        show_default=True,
        expose_value=False,
        callback=_store_prepare,
        help="Server-side prepared statements (env CYCLONE_PREPARE=0: off); turn them off "
        "behind PgBouncer in transaction mode.",
    )(func)
    func = click.option(
        "--schema",
        envvar="CYCLONE_SCHEMA",
        default="public",
        show_default=True,
        callback=_check_schema,
        help="Postgres schema holding the cyclone tables.",
    )(func)
    func = click.option(
        "--database-url",
        envvar="CYCLONE_DATABASE_URL",
        default=None,
        help="Postgres URL (env CYCLONE_DATABASE_URL); default: the embedded Postgres "
        "under ./.cyclone (env CYCLONE_HOME).",
    )(func)
    return func


def notify_option(func: F) -> F:
    """Add ``--notify/--no-notify`` (default on) to a command that waits for a run: with
    ``--no-notify`` it polls instead of LISTENing (PgBouncer in transaction mode)."""
    return click.option(
        "--notify/--no-notify",
        default=True,
        show_default=True,
        help="LISTEN for the run's end; --no-notify polls only (PgBouncer in transaction mode).",
    )(func)


def _store_prepare(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    ctx.meta[_PREPARE] = value
    return value


def prepare_enabled() -> bool:
    """Whether this command may prepare statements on the server (``--no-prepare`` or
    ``CYCLONE_PREPARE=0``: no); True outside a command."""
    ctx = click.get_current_context(silent=True)
    return True if ctx is None else bool(ctx.meta.get(_PREPARE, True))


def _check_schema(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        return validate_schema_name(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


def input_options(func: F) -> F:
    """Add ``--input JSON`` and ``--input-file PATH`` (read with :func:`read_input`)."""
    func = click.option(
        "--input-file",
        type=click.Path(dir_okay=False),
        help="Read the run input from a JSON file.",
    )(func)
    func = click.option("--input", "input_json", help="Run input as JSON.")(func)
    return func


def resolve_database(url: str | None, *, existing: bool = False, quiet: bool = False) -> str:
    """The URL to use; says on stderr which database it is (not when ``quiet``: a
    ``worker --processes`` child, whose supervisor said it once). Without ``url`` it is
    the embedded Postgres of this folder (:func:`cyclone_flow.embedded.cyclone_home`),
    created when there is none, except with ``existing`` (a command that reads or changes
    runs that must already be there): then exit 1 saying where no database was found, and
    nothing is created."""
    if url:
        info = psycopg.conninfo.conninfo_to_dict(url) if "://" in url or "=" in url else {}
        shown = f"{info.get('host') or 'localhost'}/{info.get('dbname') or ''}"
        if not quiet:
            click.echo(f"cyclone-flow: using database {shown}", err=True)
        return url
    from cyclone_flow.embedded import cyclone_home, embedded_exists, embedded_url

    home = cyclone_home()
    new = not embedded_exists(home)
    if new and existing:
        click.echo(missing_embedded_notice(home), err=True)
        raise SystemExit(1)
    resolved = embedded_url(home)
    if new:
        click.echo(new_embedded_notice(home), err=True)
    elif not quiet:
        click.echo(f"cyclone-flow: using the embedded Postgres in {home}", err=True)
    return resolved


def migrate_command(database_url: str | None, schema: str) -> str:
    """The ``cyclone-flow migrate`` command that migrates the database this command uses:
    with ``--database-url`` when the URL was given on the command line (its password as
    ``***``), without it when it came from ``CYCLONE_DATABASE_URL`` or is the embedded
    Postgres (``migrate`` finds the same one), with ``--schema`` unless ``public``."""
    command = "cyclone-flow migrate"
    ctx = click.get_current_context(silent=True)
    source = ctx.get_parameter_source("database_url") if ctx is not None else None
    if database_url and source is ParameterSource.COMMANDLINE:
        command += f" --database-url {shlex.quote(_without_password(database_url))}"
    if schema != "public":
        command += f" --schema {schema}"
    return command


def _without_password(url: str) -> str:
    """``url`` with its password shown as ``***`` (``URL`` when it cannot be parsed)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "URL"
    if "password" not in info:
        return url
    if "://" not in url:
        return psycopg.conninfo.make_conninfo(url, password="***")
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:  # the password is in the query string: show no part of it
        return "URL"
    user, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user.partition(':')[0]}:***@{host}"))


def missing_embedded_notice(home: Path) -> str:
    """The error of a command that needs runs when this folder has no embedded database:
    where none was found, and where one is (the nearest ``.cyclone`` of a parent folder
    holding one), else how to name one."""
    return _with_other_home(
        f"error: no embedded Postgres in {home}, so there are no runs here; ",
        "run `cyclone-flow migrate` then `cyclone-flow submit FLOW` here first (or "
        "`cyclone-flow run FLOW`), run from the folder holding the .cyclone of your runs, "
        "set CYCLONE_HOME to that .cyclone folder, or give --database-url",
    )


def new_embedded_notice(home: Path) -> str:
    """The stderr line of a command that has just created the embedded database in
    ``home``: where, and how to use an existing one instead (the nearest ``.cyclone`` of
    a parent folder holding one, when there is)."""
    return _with_other_home(
        f"cyclone-flow: created a new, empty embedded Postgres in {home} (none was there); ",
        "to use another one, run from the folder holding its .cyclone, set CYCLONE_HOME "
        "to that .cyclone folder, or give --database-url",
    )


def _with_other_home(line: str, otherwise: str) -> str:
    """``line`` followed by how to use the nearest parent folder's embedded database (when
    there is one and ``CYCLONE_HOME`` is not set), else by ``otherwise``."""
    from cyclone_flow.embedded import other_homes

    found = other_homes() if not os.environ.get("CYCLONE_HOME") else []
    if found:
        old = found[0]
        return line + f"to use the one in {old}, run from {old.parent} or set CYCLONE_HOME={old}"
    return line + otherwise


def setup_logging(default: int = logging.WARNING) -> None:
    """Log to stderr with the step fields; the ``DEBUG`` environment variable raises the
    level to debug."""
    level = logging.DEBUG if debug_requested() else default
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter())  # adds run_id=... node=... attempt=...
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("cyclone_flow").setLevel(level)
    logging.getLogger("psycopg.pool").setLevel(max(level, logging.WARNING))


def handle_errors(func: F) -> F:
    """Turn expected errors into a one-line message and the error's exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FlowError as exc:
            for problem in exc.problems:
                click.echo(str(problem), err=True)
            raise SystemExit(exc.exit_code) from None
        except CycloneError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(exc.exit_code) from None
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: cannot use the database: {first}", err=True)
            raise SystemExit(1) from None

    return wrapper  # type: ignore[return-value]


def read_input(input_json: str | None, input_file: str | None) -> JSON:
    """The run input from ``--input JSON`` or ``--input-file PATH`` (None when neither).
    The file is read up to the input payload limit (:func:`read_payload_file`)."""
    if input_json is not None and input_file is not None:
        raise click.UsageError("give --input or --input-file, not both")
    text, source, what = input_json, "--input", "--input"
    if input_file is not None:
        text = read_payload_file(input_file, "--input-file", "input", PayloadLimits().input_bytes)
        source, what = "--input-file", input_file
    if text is None:
        return None
    return parse_json(text, source, what)


def read_payload_file(path: str, option: str, kind: str, limit: int) -> str:
    """The UTF-8 text of ``path`` given with ``option``, at most ``limit`` bytes (the
    ``kind`` payload limit): at most ``limit + 1`` bytes are ever read, so a device or a
    pipe (``/dev/zero``) cannot exhaust memory or hang the command. A click usage error
    (exit 2) naming the option when the file cannot be read, is larger than ``limit``
    or is not UTF-8."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if len(raw) > limit:
        raise click.BadParameter(
            f"{path} is larger than the {kind} payload limit of {limit} bytes "
            f"({limit / 1024:g} KiB); nothing was sent",
            param_hint=option,
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{path} is not UTF-8 text (invalid byte at offset {exc.start})", param_hint=option
        ) from None


def parse_json(text: str, source: str, what: str | None = None) -> JSON:
    """``text`` decoded as JSON; a click usage error (exit 2) for the option ``source``
    when it is not JSON or is nested too deeply for the decoder; the message names
    ``what`` (e.g. the file the option read), else the option."""
    what = what or source
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"{what} is not valid JSON: {exc}", param_hint=source) from None
    except RecursionError:
        raise click.BadParameter(f"{what} is nested too deeply", param_hint=source) from None


def duration_option(value: str, option: str, *, max_s: float, allow_zero: bool = False) -> float:
    """``value`` (``500ms``, ``30s``, ``1h30m``, or a bare number of seconds such as ``30``:
    :func:`~cyclone_flow.durations.parse_duration_arg`) as seconds; a click
    usage error (exit 2) naming ``option`` when it is not a duration, is over ``max_s``
    seconds, or is 0 and ``allow_zero`` is False."""
    try:
        seconds = parse_duration_arg(value, max_s=max_s)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    try:
        return check_seconds(seconds, max_s=max_s, allow_zero=allow_zero)
    except DurationError:  # parsed, so finite and at most max_s: only 0 is left
        raise click.BadParameter("must be positive", param_hint=option) from None


MAX_AGE_S = 100 * 366 * 86_400.0
"""The longest retention age (``worker --retention``, ``purge --older-than``): a century;
anything longer is a typo."""


def parse_age(value: str, option: str) -> float:
    """A positive retention age such as ``7d`` as seconds; a click usage error if not."""
    return duration_option(value, option, max_s=MAX_AGE_S)


def add_import_paths(paths: tuple[str, ...]) -> None:
    """Put the current folder and each ``--import-path`` first on ``sys.path``."""
    for path in reversed((os.getcwd(), *paths)):
        full = str(Path(path).resolve())
        if full not in sys.path:
            sys.path.insert(0, full)


def _json_default(value: Any) -> str:
    """A value JSON has no type for: instants as ISO 8601 (``2026-12-01T08:07:49+00:00``),
    anything else (a UUID) as its text."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; datetimes as ISO 8601 text."""
    click.echo(json.dumps(value, indent=2, default=_json_default, ensure_ascii=False))


def out_console() -> Console:
    """The console of a command's result on stdout. It never cuts a line or a table cell
    when stdout is not a terminal (a pipe, a file): the lines are as long as they need."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 100_000)


def out_table(*headers: str) -> Table:
    """A table whose cells wrap instead of being cut with "…" when a terminal is too
    narrow (printed with :func:`out_console`, a pipe never cuts them)."""
    table = Table()
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def compact_table(headers: Sequence[str], rows: Sequence[Sequence[RenderableType]]) -> Table:
    """:func:`out_table` of ``rows`` without the columns whose cells are empty in every
    row (``""``, ``"-"`` counts as a value), so a table stays as narrow as its content."""
    keep = [i for i in range(len(headers)) if any(str(row[i]).strip() for row in rows)] or list(
        range(len(headers))
    )
    table = out_table(*(headers[i] for i in keep))
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table
