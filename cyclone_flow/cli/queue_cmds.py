"""Queue-feature commands: ``enqueue`` and ``schedule list|add|remove|pause|resume|sync``,
and the submission options shared with ``submit`` (``--queue``, ``--priority``, ``--delay``,
``--run-at``, ``--unique-key``, ``--unique-window``, ``--sequence``). See docs/queues.md.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any, NoReturn, TypeVar

import click
import psycopg
from rich.console import Console
from rich.text import Text

from cyclone_flow.cli.common import (
    database_options,
    duration_option,
    echo_json,
    handle_errors,
    notify_option,
    out_console,
    out_table,
    parse_json,
    prepare_enabled,
    resolve_database,
    setup_logging,
)
from cyclone_flow.cli.progress import count_progress, wait_for_end
from cyclone_flow.client import DEFAULT_CHUNK_SIZE, Client, RunId
from cyclone_flow.config import PayloadLimits
from cyclone_flow.durations import MAX_FLOW_DURATION_S
from cyclone_flow.errors import BatchItemError, CycloneError
from cyclone_flow.flowfile import load_flow
from cyclone_flow.flowfile.model import JSON

F = TypeVar("F")


def _duration(value: str | None, option: str, *, allow_zero: bool) -> float | None:
    if value is None:
        return None
    return duration_option(value, option, max_s=MAX_FLOW_DURATION_S, allow_zero=allow_zero)


def _instant(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 timestamp (e.g. 2030-05-01T09:00:00+02:00)",
            param_hint="--run-at",
        ) from None
    if when.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} has no UTC offset: add one (e.g. +02:00 or Z)", param_hint="--run-at"
        )
    return when


def queue_options(func: F) -> F:
    """Add the submission options of docs/queues.md to a click command."""
    decorators = [
        click.option(
            "--sequence",
            default=None,
            help="Runs sharing this key execute one at a time, in submission order.",
        ),
        click.option(
            "--unique-window",
            default=None,
            help="With --unique-key: the key is unique within windows of this length (e.g. 1h).",
        ),
        click.option(
            "--unique-states",
            default=None,
            metavar="STATE,...",
            help="With --unique-key: the run states in which a run holds the key (default "
            "running; e.g. running,completed).",
        ),
        click.option(
            "--unique-key",
            default=None,
            help="While a running run holds this key, print its id and write nothing.",
        ),
        click.option(
            "--run-at",
            default=None,
            help="ISO 8601 instant with an offset at which the run starts.",
        ),
        click.option("--delay", default=None, help="Start the run after this long (e.g. 30s)."),
        click.option(
            "--priority",
            type=click.IntRange(-32768, 32767),
            default=None,
            help="Priority of every node without its own (lower is claimed first).",
        ),
        click.option(
            "--queue", default=None, help="Queue of every node that does not set its own."
        ),
    ]
    out: Any = func
    for decorator in decorators:
        out = decorator(out)
    return out  # type: ignore[no-any-return]


def submission_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """The ``submit``/``enqueue`` keyword options from the parsed CLI values."""
    if values.get("delay") is not None and values.get("run_at") is not None:
        raise click.UsageError("give --delay or --run-at, not both")
    out: dict[str, Any] = {
        "queue": values.get("queue"),
        "priority": values.get("priority"),
        "delay": _duration(values.get("delay"), "--delay", allow_zero=True),
        "run_at": _instant(values.get("run_at")),
        "unique_key": values.get("unique_key"),
        "unique_window": _duration(
            values.get("unique_window"), "--unique-window", allow_zero=False
        ),
        "unique_states": (
            [part.strip() for part in values["unique_states"].split(",") if part.strip()]
            if values.get("unique_states") is not None
            else None
        ),
        "sequence": values.get("sequence"),
    }
    return {k: v for k, v in out.items() if v is not None}


def _json_arg(text: str | None, option: str) -> JSON:
    if text is None:
        return None
    return parse_json(text, option)


# -- bulk submission from a JSON Lines file -------------------------------------------------

MAX_CHUNK = 100_000
"""The largest ``--chunk``: items per transaction of a bulk submission from a file."""

MAX_LINE_BYTES = 4 * PayloadLimits().input_bytes
"""The longest line of an ``--inputs-file`` / ``--args-file`` read (bytes): four times the
input payload limit (a value's stored form is compact JSON, its line may be spaced out);
a longer line is refused before it is parsed."""


def chunk_option(func: F) -> F:
    """Add ``--chunk N`` (items per transaction of ``--inputs-file`` / ``--args-file``)."""
    option: Any = click.option(
        "--chunk",
        "chunk",
        type=click.IntRange(1, MAX_CHUNK),
        default=None,
        help="With --inputs-file/--args-file: items per transaction (one set-based insert "
        f"per table each; default {DEFAULT_CHUNK_SIZE}).",
    )
    return option(func)  # type: ignore[no-any-return]


@dataclass
class BulkOutcome:
    """What a bulk submission from a file wrote: the run ids in line order, the lines
    read (of the committed chunks)."""

    ids: list[RunId]
    last_line: int = 0

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.ids if r.duplicate)

    def written(self) -> str:
        """How many runs were written before a failure, and from which lines."""
        if not self.ids:
            return "no run was written"
        return f"{len(self.ids)} run(s) were written before it (lines 1-{self.last_line})"

    def to_json(self, failed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """``{"count", "new", "duplicates", "run_ids", "failed"}`` (``count``: the ids,
        duplicates included; ``new``: the runs written; ``failed``: the items that stopped
        it, each ``{"index", "line", "error"}``, with ``column`` for a line that is not
        JSON; ``[]`` when all were written)."""
        return {
            "count": len(self.ids),
            "new": len(self.ids) - self.duplicates,
            "duplicates": self.duplicates,
            "run_ids": [str(r) for r in self.ids],
            "failed": failed or [],
        }


class _LineError(Exception):
    """A line that stops a bulk submission: its number, its index among the items (0-based,
    blank lines not counted), what is wrong and the exit code; ``column`` (1-based, in
    characters) where in the line a JSON decoder stopped."""

    def __init__(
        self, line: int, message: str, exit_code: int, index: int, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.line = line
        self.exit_code = exit_code
        self.index = index
        self.column = column

    def where(self) -> str:
        """``LINE`` or ``LINE:COLUMN``."""
        return f"{self.line}" if self.column is None else f"{self.line}:{self.column}"


def _open_lines(path: str, option: str) -> tuple[IO[bytes], int | None]:
    """The binary stream of ``path`` (``-``: stdin) and its size when it is a regular
    file (for the progress bar); a usage error naming ``option`` when it cannot be
    opened."""
    if path == "-":
        return sys.stdin.buffer, None
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed by the caller)
    except OSError as exc:
        raise click.BadParameter(f"{path}: {exc.strerror or exc}", param_hint=option) from None
    st = os.fstat(fh.fileno())
    return fh, (st.st_size if stat.S_ISREG(st.st_mode) else None)


def _json_lines(fh: IO[bytes], consumed: list[int]) -> Iterator[tuple[int, JSON]]:
    """``(line number, value)`` of each non-blank line of ``fh``, read one at a time
    (a UTF-8 byte order mark at the start is skipped); ``consumed[0]`` counts the bytes
    read. Raises _LineError (exit 2) for a line that is not UTF-8, not JSON, or longer
    than :data:`MAX_LINE_BYTES` (never read further)."""
    number = 0
    items = 0  # the index of the next item
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        number += 1
        consumed[0] += len(raw)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise _LineError(
                number,
                f"longer than {MAX_LINE_BYTES} bytes (four times the input payload limit); "
                "not read further",
                2,
                items,
            )
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _LineError(number, "not UTF-8", 2, items) from None
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            # one position, in the file: the decoder's own "line 2 column 1" counts within
            # this line (its newline is a line of its own to it)
            body = text.rstrip("\r\n")
            column = min(exc.pos, len(body)) + 1
            raise _LineError(number, f"not valid JSON: {exc.msg}", 2, items, column) from None
        except ValueError as exc:
            raise _LineError(number, f"not valid JSON: {exc}", 2, items) from None
        except RecursionError:
            raise _LineError(number, "nested too deeply", 2, items) from None
        items += 1
        yield number, value


def submit_lines(
    path: str,
    chunk: int,
    write: Callable[[list[JSON]], list[RunId]],
    label: str,
    option: str,
    *,
    unit: str = "runs",
    as_json: bool = False,
) -> BulkOutcome:
    """Read the JSON Lines file ``path`` (``-``: stdin) as it goes and hand each chunk of
    ``chunk`` values to ``write`` (one committed transaction each), with a progress
    display on a terminal counting ``unit`` (``runs``, ``jobs``). On a malformed line
    (exit 2), an invalid item (its error's exit code) or a database error (exit 1),
    prints ``FILE:LINE: ...`` and how many runs the chunks before it wrote, then exits;
    nothing of the failing chunk is written. With ``as_json`` it first prints what was
    written on stdout (:meth:`BulkOutcome.to_json`, the failed item in ``failed``, the
    message in ``error``)."""
    fh, size = _open_lines(path, option)
    shown = "<stdin>" if path == "-" else path
    out = BulkOutcome([])
    consumed = [0]
    values: list[JSON] = []
    lines: list[int] = []

    def flush(update: Callable[[int, int], None]) -> None:
        try:
            got = write(values)
        except BatchItemError as exc:
            index = len(out.ids) + exc.index  # every committed item has its id
            raise _LineError(lines[exc.index], str(exc.error), exc.exit_code, index) from None
        out.ids.extend(got)
        out.last_line = lines[-1]
        values.clear()
        lines.clear()
        update(len(out.ids), consumed[0])

    def fail(message: str, code: int, failed: list[dict[str, Any]]) -> NoReturn:
        if as_json:
            echo_json({**out.to_json(failed), "error": message})
        click.echo(f"error: {message}", err=True)
        sys.exit(code)

    try:
        with count_progress(Console(stderr=True), label, size, unit) as update:
            for number, value in _json_lines(fh, consumed):
                values.append(value)
                lines.append(number)
                if len(values) >= chunk:
                    flush(update)
            if values:
                flush(update)
    except _LineError as exc:
        item: dict[str, Any] = {"index": exc.index, "line": exc.line, "error": str(exc)}
        if exc.column is not None:
            item["column"] = exc.column
        fail(f"{shown}:{exc.where()}: {exc}; {out.written()}", exc.exit_code, [item])
    except (CycloneError, psycopg.Error) as exc:
        line = f":{lines[0]}" if lines else ""
        fail(f"{shown}{line}: {exc}; {out.written()}", getattr(exc, "exit_code", 1), [])
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()
    return out


def print_bulk(out: BulkOutcome, what: str, as_json: bool) -> None:
    """The summary of a bulk submission on stdout: ``N WHAT`` (``5 run(s) submitted``),
    or when some were duplicates ``N new, M duplicates (...)``; with ``--json``
    :meth:`BulkOutcome.to_json`."""
    if as_json:
        echo_json(out.to_json())
        return
    if not out.duplicates:
        click.echo(f"{len(out.ids)} {what}")
        return
    new = len(out.ids) - out.duplicates
    click.echo(
        f"{new} new, {out.duplicates} duplicates ({new} {what}; a duplicate's unique key is "
        "held by an earlier line or an existing run: that run's id, nothing written)"
    )


@click.command("enqueue")
@click.argument("callable_path", metavar="CALLABLE")
@click.option("--args", "args_json", default=None, help="The job's args as JSON.")
@click.option(
    "--args-file",
    "args_file",
    default=None,
    metavar="FILE.jsonl",
    help="Enqueue one job per line of this JSON Lines file (its args; - for stdin), "
    "--chunk per transaction; prints the count.",
)
@chunk_option
@queue_options
@click.option(
    "--retry",
    "max_attempts",
    type=click.IntRange(1, 1000),
    default=None,
    help="Attempts in all (default 1).",
)
@click.option("--timeout", default=None, help="Timeout of one attempt, e.g. 30s.")
@click.option("--wait", is_flag=True, help="Wait until the job's run ends; print its output.")
@click.option(
    "--wait-timeout",
    default=None,
    help="With --wait: give up after this long, e.g. 30s or 5m (exit 1; the job goes on).",
)
@notify_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@database_options
@handle_errors
def enqueue_cmd(
    callable_path: str,
    args_json: str | None,
    args_file: str | None,
    chunk: int | None,
    max_attempts: int | None,
    timeout: str | None,
    wait: bool,
    wait_timeout: str | None,
    notify: bool,
    as_json: bool,
    database_url: str | None,
    schema: str,
    **queue_values: Any,
) -> None:
    """Enqueue a standalone job: a one-node run of CALLABLE (package.module:function),
    executed by a worker allowed to import it. Prints the run id. With --args-file, one
    job per line of a JSON Lines file (streamed, --chunk jobs per transaction); prints
    how many were enqueued, or the failing FILE:LINE and how many were written before it.
    With --wait, waits as `submit --wait` does (--wait-timeout: exit 1; Ctrl-C: 130).
    """
    setup_logging()
    if args_file is not None and (args_json is not None or wait):
        raise click.UsageError("--args-file goes without --args and --wait")
    if wait_timeout is not None and not wait:
        raise click.UsageError("--wait-timeout goes with --wait")
    wait_s = _duration(wait_timeout, "--wait-timeout", allow_zero=True)
    if chunk is not None and args_file is None:
        raise click.UsageError("--chunk goes with --args-file")
    args = _json_arg(args_json, "--args")
    options = submission_kwargs(queue_values)
    if max_attempts is not None:
        options["retry"] = max_attempts
    if timeout is not None:
        options["timeout"] = _duration(timeout, "--timeout", allow_zero=False)
    url = resolve_database(database_url)
    if args_file is not None:
        with Client(url, schema=schema, prepare=prepare_enabled(), notify=notify) as client:
            out = submit_lines(
                args_file,
                chunk or DEFAULT_CHUNK_SIZE,
                lambda values: client.enqueue_many(
                    callable_path, values, chunk_size=len(values), **options
                ),
                f"enqueue {callable_path}",
                "--args-file",
                unit="jobs",
                as_json=as_json,
            )
        print_bulk(out, "job(s) enqueued", as_json)
        return
    client = Client(url, schema=schema, prepare=prepare_enabled(), notify=notify)
    try:
        run_id = client.enqueue(callable_path, args, **options)
        status = None
        if wait:
            status = wait_for_end(client, run_id, as_json=as_json, timeout=wait_s, quiet=True)
    except KeyboardInterrupt:  # before the wait (which says more): no click "Aborted!"
        sys.exit(130)
    finally:
        client.shutdown()
    if as_json:
        data: dict[str, Any] = {"run_id": str(run_id), "duplicate": run_id.duplicate}
        if status is not None:
            data.update(state=str(status.state), output=status.output, error=status.error)
        echo_json(data)
    else:
        click.echo(str(run_id))
        if run_id.duplicate:
            click.echo("duplicate: an existing run holds this unique key", err=True)
        if status is not None:
            if status.state == "completed":
                echo_json(status.output)
            else:
                click.echo(f"run {run_id} {status.state}: {status.error}", err=True)
    if status is not None and status.state != "completed":
        sys.exit(1)


@click.group("schedule")
def schedule_group() -> None:
    """Cron schedules: list, add, remove, pause, resume, trigger, and sync a flow file's
    schedules."""


@schedule_group.command("list")
@click.option("--json", "as_json", is_flag=True)
@database_options
@handle_errors
def schedule_list_cmd(as_json: bool, database_url: str | None, schema: str) -> None:
    """List every schedule: its state (active or paused), source (flow or manual) and next
    tick (none while paused)."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        rows = client.list_schedules()
    if as_json:
        echo_json(
            [
                {
                    "name": r.name,
                    "flow": r.flow_name,
                    "cron": r.cron,
                    "timezone": r.timezone,
                    "input": r.input,
                    "state": "paused" if r.paused else "active",
                    "source": r.source,
                    "paused": r.paused,
                    "next_run_at": None if r.paused else r.next_run_at,
                    "last_run_at": r.last_run_at,
                    "last_run_id": r.last_run_id,
                }
                for r in rows
            ]
        )
        return
    if not rows:
        click.echo("no schedules")
        return
    table = out_table("name", "flow", "cron", "timezone", "state", "source", "next run (UTC)")
    for r in rows:
        table.add_row(
            Text(r.name),
            Text(r.flow_name),
            Text(r.cron),
            Text(r.timezone),
            "paused" if r.paused else "active",
            r.source,
            "-" if r.paused else r.next_run_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        )
    out_console().print(table)


@schedule_group.command("sync")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True))
@database_options
@handle_errors
def schedule_sync_cmd(files: tuple[str, ...], database_url: str | None, schema: str) -> None:
    """Make each flow FILE's `schedules:` the active schedules of that flow: create or
    update them by name, remove the ones the file no longer declares (run it on deploy)."""
    setup_logging()
    flows = [load_flow(f) for f in files]
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        for flow in flows:
            result = client.sync_schedules(flow)
            parts = [
                f"{label} {', '.join(names)}"
                for label, names in (
                    ("added", result.added),
                    ("updated", result.updated),
                    ("removed", result.removed),
                )
                if names
            ]
            click.echo(f"{flow.name}: {'; '.join(parts) or 'no schedules'}")


@schedule_group.command("add")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--cron", required=True, help="Cron expression, e.g. '*/5 * * * *'.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--input", "input_json", default=None, help="Run input of every tick (JSON).")
@click.option("--name", default=None, help="Schedule name (default: flow name + digest).")
@database_options
@handle_errors
def schedule_add_cmd(
    file: str,
    cron: str,
    timezone: str,
    input_json: str | None,
    name: str | None,
    database_url: str | None,
    schema: str,
) -> None:
    """Add a schedule that submits a run of FILE at every tick of --cron."""
    setup_logging()
    run_input = _json_arg(input_json, "--input")
    flow = load_flow(file)
    url = resolve_database(database_url)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        added = client.add_schedule(flow, cron, timezone=timezone, input=run_input, name=name)
        row = client.get_schedule(added)
    if row is not None and row.paused:  # an existing schedule of that name, paused
        click.echo(f"schedule {added}: paused (resume it to run)")
        return
    when = row.next_run_at.isoformat(timespec="seconds") if row else "?"
    click.echo(f"schedule {added}: next run at {when}")


def _by_name(action: str) -> Any:
    @click.argument("name")
    @database_options
    @handle_errors
    def command(name: str, database_url: str | None, schema: str) -> None:
        setup_logging()
        url = resolve_database(database_url, existing=True)
        with Client(url, schema=schema, prepare=prepare_enabled()) as client:
            getattr(client, f"{action}_schedule")(name)
        click.echo(f"schedule {name} {action}d")

    return command


schedule_group.command("remove", help="Delete a schedule (its runs stay).")(_by_name("remove"))
schedule_group.command("pause", help="Stop a schedule from submitting runs.")(_by_name("pause"))
schedule_group.command(
    "resume", help="Resume a paused schedule from its next tick (missed ticks are skipped)."
)(_by_name("resume"))


@schedule_group.command("trigger")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help='Print {"schedule", "run_id", "duplicate"}.')
@database_options
@handle_errors
def schedule_trigger_cmd(name: str, as_json: bool, database_url: str | None, schema: str) -> None:
    """Submit one run of schedule NAME now, outside its cadence (its next tick is
    unchanged); prints the run id."""
    setup_logging()
    url = resolve_database(database_url, existing=True)
    with Client(url, schema=schema, prepare=prepare_enabled()) as client:
        run_id = client.trigger_schedule(name)
    if as_json:
        echo_json({"schedule": name, "run_id": str(run_id), "duplicate": run_id.duplicate})
        return
    click.echo(run_id)
