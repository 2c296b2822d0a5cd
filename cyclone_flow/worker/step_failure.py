"""The failure of one attempt as the worker raises it (:class:`StepFailure`); its own small
module so that the completion path and the step context can share it."""

from __future__ import annotations

from cyclone_flow.states import ErrorKind


class StepFailure(Exception):
    """Internal: an attempt failed with ``kind``; ``permanent`` skips remaining attempts."""

    def __init__(self, kind: ErrorKind, message: str, *, permanent: bool, tb: str | None) -> None:
        super().__init__(message)
        self.kind = kind
        self.permanent = permanent
        self.tb = tb
