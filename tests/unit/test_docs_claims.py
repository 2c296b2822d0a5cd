"""Claims of the user guide that the code made false once, pinned so they cannot come
back: docs/failures.md said an ``async def`` handler fails at once with ``import_error``
(workers run it; only an async generator function is refused), and
docs/cli.md said ``submit --wait --json`` prints the run as ``status --json`` shows it
(it prints the ``run --json`` document: no ``waiting``, ``queue_features`` or
``log_tail``)."""

from __future__ import annotations

import re

from helpers.doc_tables import DOCS, REPO, markdown_tables

PAGES = [*sorted(DOCS.glob("*.md")), REPO / "README.md"]


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.;])\s+", " ".join(text.split())) if s.strip()]


def test_no_page_says_an_async_def_handler_fails_with_import_error() -> None:
    wrong = []
    for page in PAGES:
        for sentence in _sentences(page.read_text("utf-8")):
            if "import_error" not in sentence or "async def" not in sentence:
                continue
            # the one async def refused is an async generator function (with yield)
            rest = sentence.replace("`async def` with `yield`", "")
            rest = rest.replace("(`async def` with `yield`)", "")
            if "`async def` handler runs" in rest or "`async def` function with two" in rest:
                continue
            if "async def" in rest:
                wrong.append(f"{page.name}: {sentence}")
    assert wrong == []


def test_the_import_error_kind_does_not_list_async_def() -> None:
    text = (DOCS / "failures.md").read_text("utf-8")
    rows = [row for table in markdown_tables(text) for row in table]
    (row,) = [r for r in rows if r.get("`error_kind`") == "`import_error`"]
    assert "`async def`" not in " ".join(row.values())


def test_submit_wait_json_is_documented_as_the_run_json_document() -> None:
    text = (DOCS / "cli.md").read_text("utf-8")
    section = text[text.index("## `cyclone-flow submit`") :]
    section = section[: section.index("\n## ", 1)]
    rows = [row for table in markdown_tables(section) for row in table]
    (json_row,) = [r for r in rows if r["option"] == "`--json`"]
    meaning = json_row["meaning"]
    assert "with `--wait`, the final run as `status --json` shows it" not in meaning
    assert "[`run --json`](#cyclone-flow-run) prints it" in meaning
    for absent in ("`waiting`", "`queue_features`", "`log_tail`"):
        assert absent in meaning  # named as left out
