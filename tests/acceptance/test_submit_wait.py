"""``cyclone-flow submit --wait [--timeout S]`` (the real console script) while a worker
client runs in the test process: exit 0 when the run completed, 1 when it failed or the
wait timed out, with a clear message and no traceback."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.cli import Runner, clean_env, no_traceback
from helpers.paths import CLI

FLOW = """\
name: {name}
nodes:
  only:
    call: cyclone_test_handlers.basic:{call}
    queue: {queue}
"""


def _flow_file(tmp_path: Path, call: str, queue: str = "default") -> Path:
    path = tmp_path / f"{call}-{queue}.yaml"
    path.write_text(FLOW.format(name=f"wait-{call}", call=call, queue=queue), encoding="utf-8")
    return path


def test_submit_wait_exits_0_when_the_run_completes(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--input", '{"a": 1}', "--wait")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    run_id, *rest = proc.stdout.splitlines()  # the run id at once, its output at the end
    assert len(run_id) == 36
    assert json.loads("\n".join(rest)) == {"only": {"a": 1}}, proc.stdout
    assert f"run {run_id} completed" in proc.stderr
    assert "  step only completed" in proc.stderr  # progress lines (not a terminal)


def test_submit_wait_json_prints_the_finished_run(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--input", '{"a": 2}', "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["state"], data["output"]) == ("completed", {"only": {"a": 2}})


def test_submit_wait_exits_1_when_the_run_fails(cli: Runner, make_client, tmp_path) -> None:
    make_client(workers=1).start()
    proc = cli("submit", _flow_file(tmp_path, "boom"), "--wait", "--timeout", "60s")
    no_traceback(proc)
    assert proc.returncode == 1
    run_id = proc.stdout.strip()
    assert f"run {run_id} failed: step only discarded" in proc.stderr


def test_submit_wait_timeout_exits_1_and_leaves_the_run(cli: Runner, tmp_path) -> None:
    proc = cli("submit", _flow_file(tmp_path, "echo", "unserved"), "--wait", "--timeout", "300ms")
    no_traceback(proc)
    assert proc.returncode == 1
    run_id = proc.stdout.strip()
    assert f"run {run_id} is still running after waiting 0.3 s" in proc.stderr
    status = cli("status", run_id, "--json")
    assert json.loads(status.stdout)["state"] == "running"


def test_submit_timeout_needs_wait(cli: Runner, tmp_path) -> None:
    proc = cli("submit", _flow_file(tmp_path, "echo"), "--timeout", "5s")
    no_traceback(proc)
    assert proc.returncode == 2
    assert "--timeout goes with --wait" in proc.stderr
    bad = cli("submit", _flow_file(tmp_path, "echo"), "--wait", "--timeout", "soon")
    assert bad.returncode == 2
    assert "--timeout" in bad.stderr


class _Waiting:
    """A ``cyclone-flow`` command started in the background (stderr read line by line
    by a thread, so a test can wait for a line with a bound)."""

    def __init__(self, *args: str | Path) -> None:
        self.proc = subprocess.Popen(
            [str(CLI), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        """The first stderr line with ``needle``; fails past ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.err.append(line)
            if needle in line:
                return line
        pytest.fail(f"no line with {needle!r} in {timeout} s: {''.join(self.err)!r}")

    def interrupt(self) -> tuple[int, str, str]:
        """Ctrl-C: its exit code, stdout and the rest of stderr."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # (not communicate: the thread reads stderr)
        self.reader.join(timeout=10)  # stderr read to its end
        while not self.lines.empty():
            self.err.append(self.lines.get())
        return self.proc.returncode, out, "".join(self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _db(database_url: str, schema: str) -> tuple[str, ...]:
    return ("--database-url", database_url, "--schema", schema)


def test_submit_wait_says_when_no_live_worker_serves_the_queue_and_keeps_waiting(
    tmp_path: Path, database_url: str, schema: str
) -> None:
    flow = _flow_file(tmp_path, "echo", "unserved")
    waiting = _Waiting("submit", flow, "--wait", *_db(database_url, schema))
    try:
        line = waiting.wait_for("no live worker")
        # the reason `status` gives, word for word
        assert line.startswith("waiting: only: claimable since "), line
        assert "but no live worker serves queue 'unserved' (start one: " in line, line
        assert waiting.proc.poll() is None, "it keeps waiting"
        code, out, err = waiting.interrupt()
    finally:
        waiting.kill()
    assert code == 130, err
    run_id = out.splitlines()[0]
    assert f"interrupted: run {run_id} goes on" in err
    assert "Aborted!" not in err and "Traceback" not in err, err


def test_enqueue_wait_timeout_bounds_the_wait(cli: Runner) -> None:
    proc = cli(
        "enqueue", "cyclone_test_handlers.basic:echo", "--queue", "unserved", "--wait",
        "--wait-timeout", "300ms", "--timeout", "1h", "--json",
    )  # fmt: skip
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["state"], data["timed_out"]) == ("running", True)
    assert f"run {data['run_id']} is still running after waiting 0.3 s" in proc.stderr
    alone = cli("enqueue", "cyclone_test_handlers.basic:echo", "--wait-timeout", "1s")
    assert alone.returncode == 2 and "--wait-timeout goes with --wait" in alone.stderr


def test_enqueue_wait_says_the_queue_is_unserved_and_ctrl_c_exits_130_quietly(
    database_url: str, schema: str
) -> None:
    waiting = _Waiting(
        "enqueue", "cyclone_test_handlers.basic:echo", "--queue", "unserved", "--wait",
        *_db(database_url, schema),
    )  # fmt: skip
    try:
        waiting.wait_for("but no live worker serves queue 'unserved'")
        code, _out, err = waiting.interrupt()
    finally:
        waiting.kill()
    assert code == 130, err
    assert "interrupted: run " in err
    assert "Aborted!" not in err and "Traceback" not in err, err


def test_rerun_wait_waits_for_the_new_run_as_submit_wait_does(
    cli: Runner, make_client, tmp_path: Path
) -> None:
    make_client(workers=1).start()
    first = cli("submit", _flow_file(tmp_path, "echo"), "--input", '{"a": 3}', "--wait")
    assert first.returncode == 0, first.stderr
    source = first.stdout.splitlines()[0]
    plain = cli("rerun", source, "--from", "only", "--wait")
    no_traceback(plain)
    assert plain.returncode == 0, plain.stderr
    head, _reused, _again, *rest = plain.stdout.splitlines()
    new_id = head.split()[1].rstrip(":")
    assert head == f"run {new_id}: rerun of run {source}"
    assert json.loads("\n".join(rest)) == {"only": {"a": 3}}, plain.stdout
    assert f"run {new_id} completed" in plain.stderr
    as_json = cli("rerun", source, "--from", "only", "--wait", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert (data["state"], data["rerun_of"], data["output"]) == (
        "completed",
        source,
        {"only": {"a": 3}},
    )
    assert (data["rerun"], data["reused"]) == (["only"], [])
    bad = cli("rerun", source, "--from", "only", "--timeout", "5s")
    assert bad.returncode == 2 and "--timeout goes with --wait" in bad.stderr


def test_rerun_wait_timeout_exits_1_and_leaves_the_run(
    cli: Runner, make_client, tmp_path: Path
) -> None:
    client = make_client(workers=1)
    client.start()
    flow = _flow_file(tmp_path, "echo")
    first = cli("submit", flow, "--wait", "--json")
    assert first.returncode == 0, first.stderr
    client.shutdown()  # no worker any more: the rerun waits
    source = json.loads(first.stdout)["id"]
    proc = cli("rerun", source, "--from", "only", "--wait", "--timeout", "300ms", "--json")
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["state"], data["timed_out"]) == ("running", True)
