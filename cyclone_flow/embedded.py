"""The embedded Postgres default: with no ``--database-url`` / ``CYCLONE_DATABASE_URL``, the
CLI starts (or joins) a Postgres server from the PyPI package ``pgserver`` whose data lives
in ``.cyclone/pgdata`` under the current folder (``CYCLONE_HOME`` moves ``.cyclone``).
Every process pointed at the same folder shares the one server; it listens on a Unix
socket only, and stops when the last process using it exits normally (a killed process
stays on pgserver's list of users, so the server then keeps running).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from cyclone_flow.errors import EmbeddedUnavailableError as EmbeddedUnavailableError

_servers: dict[Path, object] = {}


def cyclone_home() -> Path:
    """``$CYCLONE_HOME`` or ``./.cyclone``, absolute."""
    return Path(os.environ.get("CYCLONE_HOME") or ".cyclone").resolve()


def embedded_url(home: Path | None = None) -> str:
    """Start or join the embedded server under ``home`` and return its connection URL.

    Raises :class:`EmbeddedUnavailableError` when pgserver is not installed or the server
    cannot start (its log is named in the message).
    """
    home = (home or cyclone_home()).resolve()
    pgdata = home / "pgdata"
    server = _servers.get(pgdata)
    if server is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pgserver
        except ImportError:
            raise EmbeddedUnavailableError(
                "no --database-url or CYCLONE_DATABASE_URL given, and the embedded Postgres "
                "is not installed: pip install 'cyclone-flow[embedded]'"
            ) from None
        home.mkdir(parents=True, exist_ok=True)
        logging.getLogger("pgserver").setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = pgserver.get_server(pgdata, cleanup_mode="stop")  # type: ignore[attr-defined]
        except Exception as exc:
            raise EmbeddedUnavailableError(
                f"the embedded Postgres in {pgdata} did not start ({exc}); see {pgdata / 'log'}"
            ) from exc
        _servers[pgdata] = server
    return str(server.get_uri())  # type: ignore[attr-defined]
