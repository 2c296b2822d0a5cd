"""The scaffold every maintenance service shares (River's ``QueueMaintainerServiceBase``):
the database, the frozen config, the publish callable, the logger and the event reporter,
and ``interval_s`` read from the config. A service subclasses :class:`MaintenanceService`,
names its ``config_class`` (built with its defaults when no config is given) and its
``name`` for the log, and writes ``run_once(now=None)``.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from cyclone_flow.db.conn import Database
from cyclone_flow.events import Reporter
from cyclone_flow.logs import LOGGER_NAME
from cyclone_flow.notify import Publish

__all__ = ["MaintenanceService", "ServiceConfig"]


class ServiceConfig(Protocol):
    """What every service's config has: ``interval_s``, seconds between two passes."""

    @property
    def interval_s(self) -> float: ...


ConfigT = TypeVar("ConfigT", bound=ServiceConfig)


class MaintenanceService(Generic[ConfigT]):
    """The shared constructor of a maintenance service: ``db``; ``config`` (None: the
    ``config_class`` with its defaults; a config with a field without a default must be
    given); ``publish`` for the wakeups of what a pass commits (None: none sent);
    ``logger`` (None: the package's); ``reporter`` for step events and exceptions (None:
    one on the logger)."""

    name: str
    """The service's name in the log."""
    config_class: ClassVar[Any]
    """The config's class, built with its defaults when no config is given."""

    def __init__(
        self,
        db: Database,
        config: ConfigT | None = None,
        publish: Publish | None = None,
        logger: logging.Logger | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.db = db
        self.config: ConfigT = self.config_class() if config is None else config
        self.publish = publish
        self.log = logger or logging.getLogger(LOGGER_NAME)
        self.reporter = reporter or Reporter(self.log)

    @property
    def interval_s(self) -> float:
        """Seconds between two passes (the config's ``interval_s``)."""
        return self.config.interval_s
