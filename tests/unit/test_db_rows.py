"""``cyclone_flow.db.rows.rows_of``: rows are built by column NAME (the statement's column
order does not matter), uuid columns come back as text, a missing column is a clear error."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from cyclone_flow.db.rows import rows_of
from cyclone_flow.states import StepState

UUID_OID, TEXT_OID = 2950, 25


def _cursor(columns: list[tuple[str, int]]) -> Any:
    result = SimpleNamespace(
        nfields=len(columns),
        fname=lambda i: columns[i][0].encode(),
        ftype=lambda i: columns[i][1],
    )
    return SimpleNamespace(
        pgresult=result, connection=SimpleNamespace(info=SimpleNamespace(encoding="utf-8"))
    )


class Row(NamedTuple):
    run_id: str
    node: str
    state: StepState


def test_columns_map_to_fields_by_name_whatever_their_order() -> None:
    run = uuid.uuid4()
    factory = rows_of(Row, convert={"state": StepState})
    make = factory(
        _cursor(
            [("state", TEXT_OID), ("extra", TEXT_OID), ("node", TEXT_OID), ("run_id", UUID_OID)]
        )
    )
    row = make(("waiting", "ignored", "a", run))
    assert row == Row(str(run), "a", StepState.WAITING) and isinstance(row.state, StepState)
    # the same layout again: the cached plan
    assert (
        factory(
            _cursor(
                [("state", TEXT_OID), ("extra", TEXT_OID), ("node", TEXT_OID), ("run_id", UUID_OID)]
            )
        )(("completed", "x", "b", None)).run_id
        is None
    )


def test_a_column_can_be_renamed_and_a_missing_one_is_an_error() -> None:
    factory = rows_of(Row, columns={"case": "node"})
    assert factory(_cursor([("run_id", TEXT_OID), ("case", TEXT_OID), ("state", TEXT_OID)]))(
        ("r", "n", "s")
    ) == Row("r", "n", "s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no column for \\['node'\\]"):
        rows_of(Row)(_cursor([("run_id", TEXT_OID), ("state", TEXT_OID)]))


def test_a_result_without_columns_has_no_rows() -> None:
    result = SimpleNamespace(nfields=0)
    make = rows_of(Row)(SimpleNamespace(pgresult=result))
    with pytest.raises(Exception, match="doesn't have a result"):
        make(())
