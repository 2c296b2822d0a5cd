"""A handler module with a visible side effect at import: a worker whose allow-list does
not cover it must never import it (its name merely starts with an allowed prefix string,
``cyclone_test_handlers.engine``, without lying below it)."""

from __future__ import annotations

import os
from typing import Any

os.environ["CYCLONE_TEST_FORBIDDEN_IMPORTED"] = "1"
_marker = os.environ.get("CYCLONE_TEST_FORBIDDEN_MARKER")
if _marker:
    with open(_marker, "w", encoding="utf-8") as _fh:
        _fh.write(str(os.getpid()))


def handler(ctx: Any, input: Any) -> Any:
    return {"imported": True}
