"""``async def`` handlers through the real CLI: ``cyclone-flow lint
--check-imports`` accepts a flow whose nodes are ``async def`` (no E025),
``cyclone-flow run`` runs it end to end (a ``def`` node after an ``async def`` one gets
its output), and ``cyclone-flow logs`` shows what the coroutine printed; the run does
not fail with ``import_error``."""

from __future__ import annotations

from pathlib import Path

from helpers.cli import Runner, json_output, no_traceback, run_cli
from helpers.paths import TEST_HANDLERS

FLOW = """name: async-e2e
nodes:
  first:
    call: cyclone_test_handlers.asyncio_handlers:double
    input: {n: 21}
  second:
    call: cyclone_test_handlers.basic:echo
    needs: [first]
    input: {got: "${{ nodes.first.output }}"}
"""


def test_lint_accepts_and_run_runs_a_flow_with_an_async_handler(
    cli: Runner, tmp_path: Path
) -> None:
    flow = tmp_path / "async.yaml"
    flow.write_text(FLOW)
    lint = run_cli("lint", flow, "--check-imports", "--import-path", TEST_HANDLERS)
    no_traceback(lint)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    proc = cli("run", flow, "--import-path", TEST_HANDLERS, "--json")
    no_traceback(proc)
    assert proc.returncode == 0, proc.stderr
    result = json_output(proc.stdout)
    assert result["state"] == "completed", result
    # the run's output is its leaf's: the echo of the async node's output
    assert result["output"] == {"second": {"got": {"doubled": 42, "thread": "cyclone-asyncio"}}}

    logs = cli("logs", result["id"], "--node", "first")
    assert logs.returncode == 0, logs.stderr
    assert " first#1 stdout: async print 21\n" in logs.stdout
    assert " first#1 log INFO: cyclone_flow.step: async ctx.log 21\n" in logs.stdout
