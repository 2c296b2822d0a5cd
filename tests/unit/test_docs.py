"""The user guide cannot drift from the code: docs/flow-reference.md documents exactly the
keys of schemas/flow.schema.json, docs/cli.md exactly the commands and options of the
click CLI, and every relative link of docs/ and README.md points at a file that exists."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import click
import pytest
from helpers.doc_tables import DOCS, REPO, code_spans, markdown_tables

from cyclone_flow.cli import main

SCHEMA = json.loads((REPO / "schemas" / "flow.schema.json").read_text("utf-8"))
DB_FLAGS = {"--database-url", "--schema", "--prepare", "--no-prepare"}


# -- flow reference -----------------------------------------------------------------------


def _schema_objects(node: Any, pointer: str = "#") -> Iterator[tuple[str, set[str]]]:
    """``(JSON pointer, property names)`` of every object schema that declares
    properties, outside conditional (allOf/if/then/else) parts."""
    if not isinstance(node, dict):
        return
    if isinstance(node.get("properties"), dict):
        yield pointer, set(node["properties"])
    for key, value in node.items():
        if key in ("allOf", "anyOf", "oneOf", "if", "then", "else", "not"):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            for name, sub in value.items():
                yield from _schema_objects(sub, f"{pointer}/{key}/{name}")
        elif isinstance(value, dict):
            yield from _schema_objects(value, f"{pointer}/{key}")


def _reference_tables() -> dict[str, set[str]]:
    text = (DOCS / "flow-reference.md").read_text("utf-8")
    out: dict[str, set[str]] = {}
    for match in re.finditer(r"<!-- schema: (\S+) -->\n((?:\|.*\n)+)", text):
        (rows,) = markdown_tables(match.group(2))
        keys = [re.fullmatch(r"`([^`]+)`", row["key"]) for row in rows]
        assert all(keys), f"{match.group(1)}: every key cell is one code span"
        names = [k.group(1) for k in keys if k]
        assert len(names) == len(set(names)), f"{match.group(1)}: a key is listed twice"
        assert match.group(1) not in out, f"two tables for {match.group(1)}"
        out[match.group(1)] = set(names)
    return out


def test_flow_reference_documents_every_schema_key_and_no_other() -> None:
    schema = dict(_schema_objects(SCHEMA))
    documented = _reference_tables()
    assert set(documented) == set(schema), "one table per object of the schema"
    for pointer, keys in schema.items():
        assert documented[pointer] == keys, pointer


def test_flow_reference_enums_are_documented() -> None:
    text = (DOCS / "flow-reference.md").read_text("utf-8")
    spans = set(code_spans(text))
    for value in SCHEMA["$defs"]["node"]["properties"]["type"]["enum"]:
        assert value in spans, value
    for value in SCHEMA["$defs"]["on_dep_failure"]["enum"]:
        assert value in spans, value


# -- CLI reference ------------------------------------------------------------------------


def _commands(group: click.Group, prefix: str = "cyclone-flow") -> Iterator[tuple[str, Any]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}", command


def _flags(command: click.Command) -> set[str]:
    flags = set()
    for param in command.params:
        if isinstance(param, click.Option):
            flags.update(f for f in (*param.opts, *param.secondary_opts) if f.startswith("--"))
    return flags - {"--help"}


def _cli_sections() -> dict[str, str]:
    text = (DOCS / "cli.md").read_text("utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def _documented_flags(body: str) -> set[str]:
    flags: set[str] = set()
    for table in markdown_tables(body):
        for row in table:
            if "option" in row:
                flags.update(s.split()[0] for s in code_spans(row["option"]) if s.startswith("--"))
    return flags


def test_cli_reference_has_one_section_per_command() -> None:
    sections = {h.strip("`") for h in _cli_sections() if h.startswith("`")}
    actual = {name for name, _ in _commands(main)}
    assert sections == actual, "document every command (and only those) in docs/cli.md"


@pytest.mark.parametrize("name", [name for name, _ in _commands(main)])
def test_cli_reference_lists_every_option_of_each_command(name: str) -> None:
    command = dict(_commands(main))[name]
    body = _cli_sections()[f"`{name}`"]
    flags = _flags(command)
    if flags >= DB_FLAGS:
        assert "[database options](#database-options)" in body, name
        flags -= DB_FLAGS
    assert _documented_flags(body) == flags, name


def test_cli_reference_database_options() -> None:
    body = _cli_sections()["Database options"]
    assert _documented_flags(body) == DB_FLAGS


# -- links -------------------------------------------------------------------------------


def _links() -> Iterator[tuple[str, str]]:
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text("utf-8")):
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                yield path.name, target


@pytest.mark.parametrize(("page", "target"), sorted(set(_links())))
def test_relative_links_resolve(page: str, target: str) -> None:
    base = REPO if page == "README.md" else DOCS
    file, _, anchor = target.partition("#")
    path = (base / file).resolve()
    assert path.exists(), f"{page}: broken link {target}"
    if anchor and path.suffix == ".md":
        headings = re.findall(r"^#+ (.+)$", path.read_text("utf-8"), flags=re.MULTILINE)
        slugs = {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, f"{page}: no heading #{anchor} in {file}"
