"""The repository's folders the tests use, and the installed ``cyclone-flow`` script."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FLOWS = EXAMPLES / "flows"
# the import path of the test handlers (package cyclone_test_handlers)
TEST_HANDLERS = REPO / "tests" / "handlers"
CLI = Path(sys.executable).parent / "cyclone-flow"
