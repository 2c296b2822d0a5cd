"""Naming a deployed flow (issue 33 review): revision numbers out of the int4 range and
malformed references are refused as options or not found (never a database error);
``submit_tx`` runs a deployed flow by name in the caller's transaction, ``submit_many``
refuses one clearly; a folder named like a flow is not a flow file; the Client's return
types are exported."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from test_deploy import flow_text, write

import cyclone_flow
from cyclone_flow import Client, load_flow
from cyclone_flow.deployments import is_flow_reference, parse_flow_reference
from cyclone_flow.errors import FlowNotDeployedError, RevisionNotFoundError, SubmitOptionError

HUGE = 2**31


def test_parse_flow_reference_bounds_the_revision_and_the_name() -> None:
    assert parse_flow_reference("nightly", None) == ("nightly", None)
    assert parse_flow_reference("nightly@3", None) == ("nightly", 3)
    assert parse_flow_reference("nightly", HUGE - 1) == ("nightly", HUGE - 1)
    for value, revision in [
        ("nightly@99999999999", None),
        ("nightly@" + "9" * 5000, None),
        ("nightly@0", None),
        ("nightly", HUGE),
        ("nightly", 0),
        ("nightly@2", 3),
        ("n" * 101, None),
        ("Nightly", None),
        ("nightly@x", None),
    ]:
        with pytest.raises(SubmitOptionError):
            parse_flow_reference(value, revision)


def test_revisions_out_of_range_are_options_or_not_found(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client()
    client.deploy([write(tmp_path, "nightly", flow_text("nightly"))])
    with pytest.raises(SubmitOptionError):
        client.submit("nightly@99999999999", {})
    with pytest.raises(SubmitOptionError):
        client.submit("nightly", {}, revision=HUGE)
    assert client.list_runs(flow="nightly", revision=HUGE) == []
    assert client.list_runs(flow="nightly", revision=-1) == []
    with pytest.raises(RevisionNotFoundError):
        client.get_revision("nightly", HUGE)
    with pytest.raises(RevisionNotFoundError):
        client.load_revision("nightly", -HUGE - 5)
    with pytest.raises(FlowNotDeployedError):
        client.get_revision("other", HUGE)
    with pytest.raises(RevisionNotFoundError):
        client.rollback("nightly", HUGE)
    with pytest.raises(RevisionNotFoundError):
        client.rollback("nightly", HUGE, dry_run=True)
    with pytest.raises(RevisionNotFoundError):
        client.diff_revisions("nightly", 1, HUGE)
    with pytest.raises(RevisionNotFoundError):
        client.diff_revisions("nightly", HUGE)


def test_a_folder_named_like_a_flow_is_not_a_flow_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkdir("nightly")
    assert is_flow_reference("nightly")
    (tmp_path / "daily").write_text("name: daily\n")
    assert not is_flow_reference("daily")


def test_the_types_the_client_returns_are_exported() -> None:
    for name in ("Revision", "DeployedFlow", "RevisionDiff", "RetireResult", "CompatProblem"):
        assert name in cyclone_flow.__all__
        assert getattr(cyclone_flow, name).__name__ == name


def test_submit_tx_runs_a_deployed_flow_by_name_in_the_callers_transaction(
    make_client: Callable[..., Client], tmp_path: Path, database_url: str, schema: str
) -> None:
    client = make_client()
    path = write(tmp_path, "nightly", flow_text("nightly"))
    client.deploy([path])
    write(tmp_path, "nightly", flow_text("nightly", "a b"))
    client.deploy([path])
    with psycopg.connect(database_url, options=f"-c search_path={schema}") as conn:
        dropped = client.submit_tx(conn, "nightly", {})
        conn.rollback()
        kept = client.submit_tx(conn, "nightly@1", {})
        pinned = client.submit_tx(conn, "nightly", {}, revision=1)
        conn.commit()
    with psycopg.connect(database_url, autocommit=True) as conn:
        current = client.submit_tx(conn, "nightly", {})  # its own transaction
    assert {r.id: r.revision for r in client.list_runs(flow="nightly")} == {
        kept: 1,
        pinned: 1,
        current: 2,
    }
    assert dropped not in {r.id for r in client.list_runs()}
    with psycopg.connect(database_url) as conn, pytest.raises(FlowNotDeployedError):
        client.submit_tx(conn, "missing", {})
    with psycopg.connect(database_url) as conn, pytest.raises(SubmitOptionError):
        client.submit_tx(conn, load_flow(path), {}, revision=1)


def test_submit_many_refuses_a_deployed_flow_name_clearly(
    make_client: Callable[..., Client], tmp_path: Path, database_url: str
) -> None:
    client = make_client()
    client.deploy([write(tmp_path, "nightly", flow_text("nightly"))])
    with pytest.raises(SubmitOptionError, match="deployed flow name"):
        client.submit_many("nightly", [{}, {}])
    with psycopg.connect(database_url) as conn, pytest.raises(SubmitOptionError):
        client.submit_many_tx(conn, "nightly@1", [{}])
    assert client.list_runs() == []
