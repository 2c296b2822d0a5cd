"""The submission options and helpers shared by ``submit``, ``enqueue`` and ``schedule``
(``--queue``, ``--priority``, ``--delay``, ``--run-at``, ``--unique-key``,
``--unique-window``, ``--sequence``; ``--chunk`` and JSON Lines input). See docs/queues.md.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, NoReturn, TypeVar

import click
import psycopg
from rich.console import Console

from cyclone_flow.cli.common import duration_option, echo_json, parse_json
from cyclone_flow.cli.progress import count_progress
from cyclone_flow.client import DEFAULT_CHUNK_SIZE, RunId
from cyclone_flow.config import PayloadLimits
from cyclone_flow.durations import MAX_FLOW_DURATION_S
from cyclone_flow.errors import BatchItemError, CycloneError
from cyclone_flow.flowfile.model import JSON

F = TypeVar("F")


def duration_value(value: str | None, option: str, *, allow_zero: bool) -> float | None:
    """Seconds of the duration ``value`` given to ``option`` (None when not given), at most
    the longest flow duration; raises click.BadParameter."""
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
        "delay": duration_value(values.get("delay"), "--delay", allow_zero=True),
        "run_at": _instant(values.get("run_at")),
        "unique_key": values.get("unique_key"),
        "unique_window": duration_value(
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


def json_arg(text: str | None, option: str) -> JSON:
    """The JSON ``text`` given to ``option`` (None when not given); raises click.BadParameter."""
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
