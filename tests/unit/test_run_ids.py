"""Run ids as users type them (``cyclone_flow.run_ids``): one rule for the Client's
``resolve_run_id`` and the dashboard's search box."""

from __future__ import annotations

import pytest

from cyclone_flow import client
from cyclone_flow.errors import RunNotFoundError
from cyclone_flow.run_ids import (
    MIN_RUN_ID_PREFIX,
    is_run_id_start,
    is_short_hex,
    parse_run_id,
    prefix_bounds,
)

FULL = "a3834a92-1b2c-4d5e-8f90-0123456789ab"


def test_a_full_id_is_normalised_and_anything_else_is_not_found() -> None:
    assert parse_run_id(FULL.upper()) == FULL
    with pytest.raises(RunNotFoundError):
        parse_run_id("a3834a92")


def test_a_prefix_has_at_least_the_minimum_digits_and_hyphens_where_a_uuid_has_them() -> None:
    assert MIN_RUN_ID_PREFIX == 4
    assert prefix_bounds("a383") == (
        "a3830000-0000-0000-0000-000000000000",
        "a383ffff-ffff-ffff-ffff-ffffffffffff",
    )
    assert prefix_bounds("a3834a92-1b") is not None
    assert prefix_bounds("a38") is None  # too short
    assert prefix_bounds("a38-34a92") is None  # a hyphen where a uuid has none
    assert prefix_bounds("a383x") is None
    assert is_short_hex("a38") and is_short_hex("A3") and not is_short_hex("a383")
    assert not is_short_hex("") and not is_short_hex("xyz")


def test_what_the_dashboard_looks_up_is_what_resolve_run_id_takes() -> None:
    assert is_run_id_start(FULL) and is_run_id_start("a383") and is_run_id_start("A3834A92")
    assert not is_run_id_start("a38")  # the dashboard searches it as a unique key instead
    assert not is_run_id_start("a38-34a92")
    assert not is_run_id_start("order-42")


def test_the_old_import_paths_of_the_client_module_still_work() -> None:
    assert client.parse_run_id is parse_run_id
    assert client.MIN_RUN_ID_PREFIX == MIN_RUN_ID_PREFIX
    assert client.AMBIGUOUS_RUN_IDS_SHOWN == 10
