"""The statements of ``sql/step_logs.sql`` (table ``cyclone_step_logs``), one typed
function each: the lines a handler logged and printed, per attempt."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cyclone_flow.db.conn import SessionLike, execute, execute_rows
from cyclone_flow.db.rows import StepLogLine, rows_of

_LINE = rows_of(StepLogLine)


def step_log_insert_many(
    s: SessionLike,
    *,
    run_id: str,
    node: str,
    attempt: int,
    generation: int,
    lines: Sequence[tuple[datetime, str, str | None, str]],
    first_seq: int = 0,
) -> None:
    """Write the ``lines`` of one attempt, each ``(at, stream, level, message)``, numbered
    from ``first_seq`` in the order given (one statement)."""
    execute(
        s,
        "step_log_insert_many",
        {
            "run_id": run_id,
            "node": node,
            "attempt": attempt,
            "generation": generation,
            "seqs": list(range(first_seq, first_seq + len(lines))),
            "ats": [line[0] for line in lines],
            "streams": [line[1] for line in lines],
            "levels": [line[2] for line in lines],
            "messages": [line[3] for line in lines],
        },
    )


LogRow = tuple[str, str, int, int, int, datetime, str, str | None, str]
"""One line to store: ``(run_id, node, attempt, generation, seq, at, stream, level,
message)``."""


_BATCH_COLUMNS = (
    "run_ids", "nodes", "attempts", "generations", "seqs", "ats", "streams", "levels", "messages"
)  # fmt: skip


def step_log_insert_batch(s: SessionLike, rows: Sequence[LogRow]) -> None:
    """Write ``rows`` of any attempts in one statement, in the order given (their ids
    follow that order)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(_BATCH_COLUMNS)
    params = {name: list(col) for name, col in zip(_BATCH_COLUMNS, columns, strict=True)}
    execute(s, "step_log_insert_batch", params)


def step_log_list(
    s: SessionLike,
    *,
    run_id: str,
    node: str | None = None,
    attempt: int | None = None,
    after: int = 0,
    limit: int = 10_000,
) -> list[StepLogLine]:
    """Up to ``limit`` lines of a run with an id above ``after``, in write order; only
    those of ``node`` (and its fan-out items) and ``attempt`` when given."""
    params = {"run_id": run_id, "node": node, "attempt": attempt, "after": after, "limit": limit}
    return execute_rows(s, "step_log_list", params, _LINE).fetchall()


def step_log_list_tail(s: SessionLike, *, run_id: str, limit: int) -> list[StepLogLine]:
    """The last ``limit`` lines of a run, oldest first."""
    rows = execute_rows(s, "step_log_list_tail", {"run_id": run_id, "limit": limit}, _LINE)
    return rows.fetchall()[::-1]


def step_log_list_node_tail(
    s: SessionLike, *, run_id: str, node: str, limit: int
) -> list[StepLogLine]:
    """The last ``limit`` lines of ``node`` (and its fan-out items) in a run, in write
    order (read newest first by id, then reversed)."""
    params = {"run_id": run_id, "node": node, "limit": limit}
    return execute_rows(s, "step_log_list_node_tail", params, _LINE).fetchall()[::-1]


def step_log_count_node(s: SessionLike, *, run_id: str, node: str) -> int:
    """How many lines ``node`` (and its fan-out items) has in a run."""
    row = execute(s, "step_log_count_node", {"run_id": run_id, "node": node}).fetchone()
    return int(row[0]) if row else 0
