"""``$ref`` in a flow's input_schema through the Python API: a
reference to a URL or a file is never fetched (a local server counts the requests, an
audit hook the files opened), and a reference that cannot be resolved or loops is an
InputValidationError before anything is written, not a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.http import CountingServer, counting_server

from cyclone_flow import Client, InputValidationError
from cyclone_flow.flowfile.build import build_flow
from cyclone_flow.flowfile.load import lint_text

_OPENED: list[str] | None = None  # the audit hook records opened paths while a list


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENED is not None and args and isinstance(args[0], str):
        _OPENED.append(args[0])


sys.addaudithook(_audit)  # hooks cannot be removed: it records only inside `opened`


@pytest.fixture
def opened() -> Iterator[list[str]]:
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


@pytest.fixture
def server() -> Iterator[CountingServer]:
    with counting_server() as counted:
        yield counted


def _schemas(server: CountingServer, tmp_path: Path) -> dict[str, dict[str, Any]]:
    local = tmp_path / "schema.json"
    local.write_text('{"type": "string"}')
    return {
        "http": {"$ref": f"{server.url}/x.json"},
        "nested_http": {"type": "object", "properties": {"a": {"$ref": f"{server.url}/a"}}},
        "relative_to_an_id": {"$id": f"{server.url}/root.json", "$ref": "other.json"},
        "file": {"$ref": local.as_uri()},
        "missing": {"$ref": "#/$defs/nope"},
        "self": {"$ref": "#"},
    }


def test_lint_reports_each_reference_and_fetches_nothing(
    server: CountingServer, tmp_path: Path, opened: list[str]
) -> None:
    schemas = _schemas(server, tmp_path)
    opened.clear()  # from here on
    for key, schema in schemas.items():
        text = f"name: refs\ninput_schema: {schema}\nnodes:\n  a: {{call: 'm:f'}}\n"
        problems = lint_text(text.replace("'", '"'))
        assert [(p.code, p.line) for p in problems] == [("E006", 2)], (key, problems)
    assert server.requests == []
    assert str(tmp_path / "schema.json") not in opened


def test_submit_refuses_each_reference_with_a_typed_error_and_fetches_nothing(
    make_client: Callable[..., Client],
    db: Any,
    server: CountingServer,
    tmp_path: Path,
    opened: list[str],
) -> None:
    client = make_client()
    schemas = _schemas(server, tmp_path)
    opened.clear()  # from here on
    for key, schema in schemas.items():
        # a definition that did not go through lint (as one stored by an older version)
        flow = build_flow({"name": f"refs-{key}", "input_schema": schema, "nodes": {"a": {}}})
        with pytest.raises(InputValidationError) as info:
            client.submit(flow, {"a": 1})
        message = str(info.value)
        assert "cannot be resolved" in message or "loops back to itself" in message, message
    assert server.requests == []
    assert str(tmp_path / "schema.json") not in opened
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone()[0] == 0
