"""The user guide cannot drift from the code: docs/flow-reference.md documents exactly the
keys of schemas/flow.schema.json, docs/cli.md exactly the commands and options of the
click CLI, every relative link of docs/ and README.md points at a file that exists,
docs/architecture.md names only real modules, functions and SQL statements and the layers
of the import-linter contract, and README's Layout names every top-level module."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from helpers.doc_tables import DOCS, REPO, code_spans, markdown_tables

from cyclone_flow.cli import main
from cyclone_flow.db.queries import statements

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


# -- architecture ------------------------------------------------------------------------

ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = REPO / "cyclone_flow"
# a path (relative to cyclone_flow/ or to the repository), optionally ``:Name[.attr]``
_LOCATION = re.compile(
    r"(?P<path>(?:[\w.*]+/)*[\w.*]+\.(?:py|sql|md|json|toml))(?::(?P<name>[\w.]+))?"
)
_FOLDER = re.compile(r"(?:[\w.]+/)+")


def _table(text: str, marker: str) -> list[dict[str, str]]:
    match = re.search(rf"<!-- {re.escape(marker)} -->\n((?:\|.*\n)+)", text)
    assert match, f"docs/architecture.md: no table after <!-- {marker} -->"
    (rows,) = markdown_tables(match.group(1))
    return rows


def _resolve(path: str) -> list[Path]:
    """The files ``path`` names, relative to the package or, failing that, the repository
    (a ``*`` is a glob that must match something); a bare file name is looked for anywhere
    in the package (``runs.sql``)."""
    if "/" not in path and (found := sorted(PACKAGE.rglob(path))):
        return found
    for base in (PACKAGE, REPO):
        found = sorted(base.glob(path)) if "*" in path else [base / path]
        found = [p for p in found if p.exists()]
        if found:
            return found
    return []


def _defines(module: Path, dotted: str) -> bool:
    """Whether ``module`` defines ``dotted`` (``name`` at top level, or ``Class.attr``: a
    method, property or class attribute of a top-level class)."""
    body: list[ast.stmt] = ast.parse(module.read_text("utf-8")).body
    for part in dotted.split("."):
        found = None
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            if part in names:
                found = node
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_architecture_layers_are_the_import_linter_contract() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    rows = _table(ARCHITECTURE.read_text("utf-8"), "layers: pyproject.toml")
    documented = []
    for row in rows:
        (span,) = code_spans(row["layer"])
        documented.append(span)
    assert documented == layers, "the layer table of docs/architecture.md, top to bottom"


def test_architecture_paths_and_names_exist() -> None:
    text = ARCHITECTURE.read_text("utf-8")
    checked = 0
    for span in code_spans(text):
        if "<" in span:
            continue  # a pattern such as db/sql/<table>.sql
        match = _LOCATION.fullmatch(span)
        if match is None:
            if _FOLDER.fullmatch(span):
                folders = (PACKAGE / span, REPO / span)
                assert any(f.is_dir() for f in folders), f"docs/architecture.md: no folder {span}"
            continue
        files = _resolve(match["path"])
        assert files, f"docs/architecture.md: no file {match['path']}"
        if match["name"]:
            assert any(_defines(f, match["name"]) for f in files if f.suffix == ".py"), (
                f"docs/architecture.md: {match['path']} defines no {match['name']}"
            )
        checked += 1
    assert checked > 50  # the page names its modules this way


def test_architecture_transitions_name_real_statements() -> None:
    named = statements()
    sources = "\n".join(
        p.read_text("utf-8")
        for p in PACKAGE.rglob("*.py")
        if "db" not in p.relative_to(PACKAGE).parts
    )
    rows = _table(ARCHITECTURE.read_text("utf-8"), "transitions")
    for row in rows:
        assert any(_LOCATION.fullmatch(s) for s in code_spans(row["where"])), row["transition"]
        for span in code_spans(row["SQL statements"]):
            assert span in named, f"{row['transition']}: no SQL statement {span}"
            # used by the engine, worker, maintenance or client through its typed function
            assert re.search(rf"\b(send_)?{span}\b", sources), f"{span} is not used"


def test_readme_layout_names_every_top_level_module() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    layout = text.split("## Layout", 1)[1].split("```")[1]
    for entry in sorted(PACKAGE.iterdir()):
        if entry.name.startswith("__") or entry.name == "py.typed":
            continue
        if entry.is_dir() and not (entry / "__init__.py").exists():
            continue
        name = entry.name if entry.is_file() else f"{entry.name}/"
        assert re.search(rf"(?<![\w/]){re.escape(name)}", layout), f"README Layout: {name}"


def test_readme_layout_names_every_module_of_the_dashboard() -> None:
    text = (REPO / "README.md").read_text("utf-8")
    layout = text.split("## Layout", 1)[1].split("```")[1]
    for entry in sorted((PACKAGE / "ui").glob("*.py")):
        if not entry.name.startswith("__"):
            assert re.search(rf"(?<![\w/]){re.escape(entry.name)}", layout), entry.name


def test_readme_dependencies_are_the_import_linter_layers() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    text = (REPO / "README.md").read_text("utf-8")
    chain = text.split("Dependencies point one way", 1)[1].split(". The import-linter", 1)[0]
    chain = chain.split("): ", 1)[1]  # after the legend
    assert code_spans(chain) == layers, "README's dependency line, top to bottom"


def test_readme_test_command_is_what_ci_runs() -> None:
    """README's "Run the tests" command is the one ``.ci/run`` runs, word for word."""
    text = (REPO / "README.md").read_text("utf-8")
    block = text.split("## Run the tests", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    command = block.strip()
    assert "\n" not in command and "pytest" in command, command
    ci = (REPO / ".ci" / "run").read_text("utf-8").splitlines()
    assert command in ci, f".ci/run does not run README's test command: {command}"
