"""Bulk submission from the command line: ``submit FLOW --inputs-file FILE.jsonl`` and
``enqueue CALLABLE --args-file FILE.jsonl`` (streamed, ``--chunk`` per transaction, ``-``
for stdin): the count printed, and on a malformed or invalid line ``FILE:LINE`` with how
many runs the chunks before it wrote (exit 2 for a malformed line)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from helpers.cli import CLI, Runner, clean_env, json_output, no_traceback

NOOP = "cyclone_test_handlers.queueing:noop"
FLOW = f"""
name: bulk-cli
input_schema:
  type: object
  properties: {{n: {{type: integer}}}}
  required: [n]
nodes:
  a: {{call: "{NOOP}"}}
  b: {{call: "{NOOP}", needs: [a]}}
"""


def _flow(tmp_path: Path) -> Path:
    path = tmp_path / "bulk.yaml"
    path.write_text(FLOW)
    return path


def _inputs(db: Any, ids: list[str] | None = None) -> list[Any]:
    """The inputs of the runs ``ids`` in that order (None: of every run, sorted as JSON)."""
    by_id = dict(db.execute("SELECT id::text, input FROM cyclone_runs").fetchall())
    if ids is None:
        return sorted(by_id.values(), key=repr)
    return [by_id[i] for i in ids]


def test_submit_inputs_file_prints_the_count_and_ids_in_line_order(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"n": 1}\n{"n": 2}\n\n{"n": 3}\n{"n": 4}\n')
    done = cli("submit", _flow(tmp_path), "--inputs-file", lines, "--chunk", "2", "--json")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    out = json_output(done.stdout)
    assert out["count"] == 4 and out["duplicates"] == 0
    assert _inputs(db, out["run_ids"]) == [{"n": n} for n in (1, 2, 3, 4)]
    assert db.execute("SELECT count(*) FROM cyclone_steps").fetchone() == (8,)
    plain = cli("submit", _flow(tmp_path), "--inputs-file", lines, "--queue", "bulk")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == "4 run(s) submitted"


def test_a_malformed_line_exits_2_naming_it_and_what_was_written(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"n": 1}\n{"n": 2}\n{"n": 3}\n{"n": 4\n{"n": 5}\n')
    done = cli("submit", _flow(tmp_path), "--inputs-file", lines, "--chunk", "2")
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert f"{lines}:4:8: not valid JSON" in done.stderr
    assert "2 run(s) were written before it (lines 1-2)" in done.stderr
    assert _inputs(db) == [{"n": 1}, {"n": 2}]  # line 3's chunk was not written


def test_an_invalid_item_names_its_line(cli: Runner, tmp_path: Path, db: Any) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"n": 1}\n\n{"n": "two"}\n{"n": 3}\n')
    done = cli("submit", _flow(tmp_path), "--inputs-file", lines)
    no_traceback(done)
    assert done.returncode == 1, done.stderr
    assert f"{lines}:3: " in done.stderr and "'two'" in done.stderr
    assert "no run was written" in done.stderr
    assert _inputs(db) == []


def test_enqueue_args_file_from_stdin(database_url: str, schema: str, cli: Runner, db: Any) -> None:
    done = subprocess.run(
        [str(CLI), "enqueue", NOOP, "--args-file", "-", "--retry", "2", "--chunk", "2",
         "--json", "--database-url", database_url, "--schema", schema],
        input='{"i": 1}\n[2]\n"three"\n',
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )  # fmt: skip
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    out = json_output(done.stdout)
    assert out["count"] == 3
    assert _inputs(db, out["run_ids"]) == [{"i": 1}, [2], "three"]
    assert db.execute("SELECT DISTINCT max_attempts FROM cyclone_steps").fetchall() == [(2,)]
    bad = subprocess.run(
        [str(CLI), "enqueue", NOOP, "--args-file", "-", "--database-url", database_url,
         "--schema", schema],
        input="1\n2\nnope\n",
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "<stdin>:3:1: not valid JSON" in bad.stderr, bad.stderr
    assert "no run was written" in bad.stderr  # one chunk of 1,000: lines 1-2 not written
    plain = subprocess.run(
        [str(CLI), "enqueue", NOOP, "--args-file", "-", "--database-url", database_url,
         "--schema", schema],
        input="1\n2\n",
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )  # fmt: skip
    assert plain.returncode == 0 and plain.stdout.strip() == "2 job(s) enqueued", plain.stderr


def test_bulk_option_mistakes_exit_2(cli: Runner, tmp_path: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text("1\n")
    for args, needle in [
        (("submit", _flow(tmp_path), "--inputs-file", lines, "--wait"), "--inputs-file goes"),
        (("submit", _flow(tmp_path), "--inputs-file", lines, "--input", "{}"), "--inputs-file"),
        (("enqueue", NOOP, "--args-file", lines, "--args", "1"), "--args-file goes"),
        (("enqueue", NOOP, "--args-file", lines, "--chunk", "0"), "--chunk"),
        (("enqueue", NOOP, "--args-file", tmp_path / "missing.jsonl"), "missing.jsonl"),
        (("enqueue", NOOP, "--args-file", tmp_path), "invalid value for --args-file"),
        (("enqueue", NOOP, "--args", "1", "--chunk", "5"), "--chunk goes with --args-file"),
        (("submit", _flow(tmp_path), "--input", "{}", "--chunk", "5"), "--chunk goes with"),
    ]:
        done = cli(*args)
        no_traceback(done)
        assert done.returncode == 2, (args, done.stderr)
        assert needle in done.stderr, (args, done.stderr)


def test_a_bom_is_skipped_and_a_huge_line_refused_before_it_is_read(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"n": 1}\r\n{"n": 2}\r\n')  # as a spreadsheet saves it
    done = cli("submit", _flow(tmp_path), "--inputs-file", bom)
    assert done.returncode == 0 and done.stdout.strip() == "2 run(s) submitted", done.stderr
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:
        fh.write(b'{"n": 3}\n{"n": 4, "pad": "')
        fh.write(b"x" * (5 * 1024 * 1024))  # over four times the 1 MiB input limit
        fh.write(b'"}\n')
    refused = cli("submit", _flow(tmp_path), "--inputs-file", huge, "--chunk", "1")
    no_traceback(refused)
    assert refused.returncode == 2
    assert f"{huge}:2: longer than 4194304 bytes" in refused.stderr
    assert "1 run(s) were written before it (lines 1-1)" in refused.stderr
    assert len(refused.stderr) < 2_000
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (3,)


def test_a_line_that_is_not_json_has_one_position_in_the_file(cli: Runner, tmp_path: Path) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"n": 1}\n{"n": 2\n')  # the decoder says "line 2 column 1" of its text
    done = cli("submit", _flow(tmp_path), "--inputs-file", lines)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    assert f"error: {lines}:2:8: not valid JSON: Expecting ',' delimiter; " in done.stderr
    assert "column" not in done.stderr, done.stderr
    as_json = cli("submit", _flow(tmp_path), "--inputs-file", lines, "--json")
    [failed] = json_output(as_json.stdout)["failed"]
    assert (failed["line"], failed["column"]) == (2, 8), failed


def test_duplicates_are_counted_apart_from_the_new_runs(
    cli: Runner, tmp_path: Path, db: Any
) -> None:
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(f'{{"n": {n}}}\n' for n in range(5)))
    args = ("submit", _flow(tmp_path), "--inputs-file", lines, "--unique-key", "once")
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("1 new, 4 duplicates (1 run(s) submitted; "), first.stdout
    again = cli(*args)  # every line a duplicate: nothing written
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("0 new, 5 duplicates (0 run(s) submitted; "), again.stdout
    assert db.execute("SELECT count(*) FROM cyclone_runs").fetchone() == (1,)
    out = json_output(cli(*args, "--json").stdout)
    assert (out["count"], out["new"], out["duplicates"]) == (5, 0, 5), out
