"""cyclone_flow.cli.output in a subprocess of its own (it redirects the
process's descriptors 1 and 2): output no attempt can be given goes to the real stderr,
never to stdout; the logging handlers and ``sys.stderr`` reach the real stderr while the
redirect holds, and everything is put back after it."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, os, sys
from cyclone_flow.cli.output import HandlerOutput
logging.basicConfig(handlers=[logging.StreamHandler(sys.stderr)], level=logging.INFO)
before = sys.stderr
out = HandlerOutput.start()
os.write(1, b"stray on 1\\n")
os.write(2, b"stray on 2\\n")
logging.getLogger("x").info("a log line")
print("to sys.stderr", file=sys.stderr)
out.close()
assert sys.stderr is before
print("the result")
"""


def test_unattributed_output_goes_to_stderr_and_stdout_keeps_only_the_result() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "the result\n"
    for line in ("stray on 1", "stray on 2", "INFO:x:a log line", "to sys.stderr"):
        assert line in proc.stderr.splitlines(), proc.stderr
