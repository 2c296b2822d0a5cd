"""docs/options.md cannot drift: its table lists exactly the seeds' client options
(``SEED_OPTIONS``) with their seed names and the defaults ``ClientConfig`` really has, and
its second table lists exactly cyclone-flow's own options."""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import Any

import pytest
from helpers.doc_tables import REPO, markdown_tables

from cyclone_flow.config import (
    SEED_OPTIONS,
    ClientOptions,
    PayloadLimits,
    RetentionConfig,
    build_config,
)
from cyclone_flow.logs import DefaultHandler

OPTIONS_MD = REPO / "docs" / "options.md"
# Defaults that are computed, not literal: the doc describes them in words.
COMPUTED = {"tx_slots", "client_id", "logger"}


def _tables() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    tables = markdown_tables(OPTIONS_MD.read_text("utf-8"))
    seed = [t for t in tables if "seed option" in t[0]]
    own = [t for t in tables if t and "seed option" not in t[0] and "option" in t[0]]
    assert len(seed) == 1 and len(own) == 1, "docs/options.md: expected two option tables"
    return seed[0], own[0]


def _code(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell.strip())
    assert match, f"expected one code span, got {cell!r}"
    return match.group(1)


WORDS = object()  # the cell describes the default in words


def _literal(cell: str) -> Any:
    """The value of a cell that starts with a code span (a Python expression), else
    ``WORDS``."""
    match = re.match(r"`([^`]+)`", cell.strip())
    if not match:
        return WORDS
    names = {"PayloadLimits": PayloadLimits, "RetentionConfig": RetentionConfig}
    return eval(match.group(1), {"__builtins__": {}}, names)  # our own doc, test only


def _normal(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return tuple(value)
    return value


def test_seed_table_lists_every_seed_option_once_with_its_seed_name() -> None:
    seed, _ = _tables()
    names = [_code(row["option"]) for row in seed]
    assert names == list(SEED_OPTIONS), "the table must follow SEED_OPTIONS one for one"
    assert len(names) == 15
    for row in seed:
        name = _code(row["option"])
        assert _code(row["seed option"]) == SEED_OPTIONS[name], name
        assert row["unit"].strip() and row["meaning"].strip(), name


def test_every_documented_option_is_a_client_option() -> None:
    keys = set(ClientOptions.__annotations__)
    missing = set(SEED_OPTIONS) - keys
    assert not missing, f"options documented but not accepted: {missing}"


def test_seed_table_defaults_are_the_real_defaults() -> None:
    seed, _ = _tables()
    config = build_config({})
    for row in seed:
        name = _code(row["option"])
        documented = _literal(row["default"])
        if name in COMPUTED:
            assert documented is WORDS, f"{name}: a computed default is described in words"
            continue
        assert documented is not WORDS, f"{name}: the default cell must start with `value`"
        actual = config.workers if name == "workers" else getattr(config, name)
        assert _normal(documented) == _normal(actual), name


def test_computed_defaults_are_what_the_table_says() -> None:
    seed, _ = _tables()
    cells = {_code(row["option"]): row["default"] for row in seed}
    config = build_config({"worker_queues": {"a": 2, "b": 5}})
    assert "total worker count" in cells["tx_slots"]
    assert config.tx_slots == 7
    assert cells["client_id"].strip() == "hostname/pid/random"
    host, pid, rand = build_config({}).client_id.split("/")
    assert (host, pid) == (socket.gethostname(), str(os.getpid()))
    assert re.fullmatch(r"[a-z0-9]{6}", rand)
    assert "stderr text handler at INFO" in cells["logger"]
    logger = build_config({}).logger
    assert logger is logging.getLogger("cyclone_flow")
    assert any(isinstance(h, DefaultHandler) for h in logger.handlers)


def test_own_options_table_lists_the_other_keywords() -> None:
    _, own = _tables()
    names = {_code(row["option"]) for row in own}
    assert names == set(ClientOptions.__annotations__) - set(SEED_OPTIONS)
    config = build_config({})
    for row in own:
        name = _code(row["option"])
        if name == "sweep_interval":
            assert row["default"] == "`lease_ttl / 3`, at most 10"
            assert config.sweep_interval == min(10.0, config.lease_ttl / 3)
        else:
            assert _literal(row["default"]) == getattr(config, name), name


@pytest.mark.parametrize("name", sorted(SEED_OPTIONS))
def test_seed_names_are_the_specifications(name: str) -> None:
    seed_name = SEED_OPTIONS[name]
    assert re.fullmatch(r"With[A-Za-z]+\(.*\)", seed_name), seed_name
    go = seed_name.split("(")[0].removeprefix("With")
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", go).lower()
    aliases = {
        "retention_sweep": "retention",
        "client_i_d": "client_id",
        "lease_t_t_l": "lease_ttl",
    }
    assert aliases.get(snake, snake) == name
