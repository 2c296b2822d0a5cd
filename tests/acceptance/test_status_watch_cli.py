"""``cyclone-flow status RUN --watch``: follows a run until it ends, through the
real script in a subprocess. In a pipe it prints a line per change (no redraws) and exits
like ``run`` (0 completed, 1 not); on a terminal (a pty) it draws a tree of the nodes with
their state, attempt, duration and why a step waits; Ctrl-C exits 130 quietly."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
from pathlib import Path

import helpers.cli as cli_helpers
from helpers.cli import Runner, clean_env, no_traceback
from helpers.paths import CLI
from helpers.pty_cli import PtyProcess, screen

WORKER = (
    *cli_helpers.WORKER,
    "--lease-ttl",
    "5s",
)
RETRIES = (
    "name: watched\n"
    "nodes:\n"
    "  a: {call: 'cyclone_test_handlers.basic:echo'}\n"
    "  b:\n"
    "    call: cyclone_test_handlers.ops:flaky\n"
    "    needs: [a]\n"
    "    retry: {max_attempts: 2, backoff: {initial: 0s}}\n"
)
SIGNALLED = (
    "name: signalled\n"
    "nodes:\n"
    "  a: {call: 'cyclone_test_handlers.basic:echo'}\n"
    "  w: {type: wait_signal, signal: go, needs: [a]}\n"
    "  c: {call: 'cyclone_test_handlers.basic:echo', needs: [w]}\n"
)
DURATION = r"(\d+ ms|\d+\.\d s|\d+ min \d\d s)"  # the one style: describe.duration


def _submit(cli: Runner, tmp_path: Path, text: str, run_input: str = "{}") -> str:
    flow = tmp_path / "flow.yaml"
    flow.write_text(text)
    proc = cli("submit", flow, "--input", run_input)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _db_args(database_url: str, schema: str) -> list[str]:
    return ["--database-url", database_url, "--schema", schema]


def test_in_a_pipe_it_prints_a_line_per_change_until_the_run_ends(
    cli: Runner, tmp_path: Path, database_url: str, schema: str
) -> None:
    run_id = _submit(cli, tmp_path, RETRIES, '{"succeed_on": 2}')
    watch = subprocess.Popen(  # started before any worker: it follows the run as it goes
        [
            str(CLI),
            "status",
            run_id[:8],
            "--watch",
            "--interval",
            "50ms",
            *_db_args(database_url, schema),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    got: queue.Queue[str] = queue.Queue()
    assert watch.stdout is not None
    reader = threading.Thread(target=lambda: [got.put(line) for line in watch.stdout], daemon=True)
    reader.start()
    try:
        first = [got.get(timeout=30), got.get(timeout=30)]  # printed before the worker starts
        worker = cli(*WORKER)
        assert worker.returncode == 0, worker.stderr
        watch.wait(timeout=60)
        reader.join(timeout=10)
        assert watch.stderr is not None
        err = watch.stderr.read()
    finally:
        watch.kill()
        watch.wait()
        for stream in (watch.stdout, watch.stderr):
            stream.close()
    out = "".join(first + [got.get() for _ in range(got.qsize())])
    assert watch.returncode == 0, (out, err)
    assert "Traceback" not in out + err
    assert "\x1b[" not in out, "no terminal escapes in a pipe"
    waits, lines = [], out.splitlines()
    while lines and lines[0].startswith("waiting: "):
        waits.append(lines.pop(0))
    # where it stood when the watch started: why each step waited, as `status` says it
    assert len(waits) == 2, out
    assert waits[0].startswith("waiting: a: claimable since "), out
    assert "no live worker serves queue 'default'" in waits[0], out
    assert waits[1].startswith("waiting: b: "), out
    assert lines == [
        "  step a completed",
        "  step b attempt 1 failed: RuntimeError: flaky attempt 1",
        "  step b completed",
        f"run {run_id} completed",
    ], out


def test_a_run_that_failed_exits_1_at_once(cli: Runner, tmp_path: Path) -> None:
    run_id = _submit(
        cli,
        tmp_path,
        "name: doomed\nnodes:\n  a: {call: 'cyclone_test_handlers.ops:always_fails'}\n",
    )
    assert cli(*WORKER).returncode == 0
    proc = cli("status", run_id, "--watch", timeout=60)
    no_traceback(proc)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[0] == "  step a discarded: RuntimeError: always fails"
    assert lines[-1].startswith(f"run {run_id} failed: ")


def test_on_a_terminal_it_draws_a_tree_with_states_durations_and_waits(
    cli: Runner, tmp_path: Path, database_url: str, schema: str
) -> None:
    run_id = _submit(cli, tmp_path, SIGNALLED)
    assert cli(*WORKER).returncode == 0  # a completes; w waits for its signal
    watch = PtyProcess(
        "status", run_id, "--watch", "--interval", "50ms", *_db_args(database_url, schema)
    )
    try:
        watch.wait_for("waiting: ")
        shown = screen(watch.raw)
        assert any(line.startswith(f"run {run_id}  flow signalled  running") for line in shown)
        node_a = next(line for line in shown if re.search(r"\ba  completed", line))
        assert re.search(rf"a  completed  attempt 1/1  {DURATION}$", node_a), node_a
        # the awaited signal is said once, on the line below the node (with the command)
        node_w = next(line for line in shown if re.search(r"\bw  waiting", line))
        assert "'go'" not in node_w, shown
        assert "attempt" not in node_w, node_w  # never claimed: a node the engine starts
        assert any("waiting: awaits signal 'go'" in x and "cyclone-flow signal" in x for x in shown)
        assert sum("'go'" in line for line in shown) == 1, shown

        assert cli("signal", run_id, "go").returncode == 0
        assert cli(*WORKER).returncode == 0  # c
        code = watch.wait(timeout=60)
    finally:
        watch.kill()
    final = screen(watch.raw)
    assert code == 0, "\n".join(final)
    assert "Traceback" not in watch.raw
    tree = [line for line in final if line.strip()]
    assert any(line.startswith(f"run {run_id}  flow signalled  completed") for line in tree)
    for node in ("a", "w", "c"):
        assert any(re.search(rf"\b{node}  completed", line) for line in tree), tree
    assert not any("waiting: " in line for line in tree[-4:]), "the last tree has no waits"


def test_ctrl_c_exits_130_without_a_traceback(
    cli: Runner, tmp_path: Path, database_url: str, schema: str
) -> None:
    run_id = _submit(cli, tmp_path, SIGNALLED)
    watch = PtyProcess(
        "status", run_id, "--watch", "--interval", "50ms", *_db_args(database_url, schema)
    )
    try:
        watch.wait_for("waiting: ")
        watch.proc.send_signal(signal.SIGINT)
        code = watch.wait(timeout=30)
    finally:
        watch.kill()
    assert code == 130, watch.raw
    assert "Traceback" not in watch.raw and "KeyboardInterrupt" not in watch.raw


def test_watch_refuses_json_and_interval_needs_watch(cli: Runner, tmp_path: Path) -> None:
    run_id = _submit(cli, tmp_path, SIGNALLED)
    for args, needle in (
        (("--watch", "--json"), "--watch does not go with --json"),
        (("--interval", "1s"), "--interval goes with --watch"),
        (("--watch", "--interval", "soon"), "--interval"),
    ):
        proc = cli("status", run_id, *args)
        no_traceback(proc)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)
