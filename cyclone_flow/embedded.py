"""The embedded Postgres default: with no ``--database-url`` / ``CYCLONE_DATABASE_URL``, the
CLI starts (or joins) a Postgres server from the PyPI package ``pgserver`` whose data lives
in ``.cyclone/pgdata`` under the current folder (``CYCLONE_HOME`` moves ``.cyclone``).
Every process pointed at the same folder shares the one server; it listens on a Unix
socket only, and stops when the last process using it exits normally. A killed process
stays on pgserver's list of users, so the server it used keeps running until the next
process that joins it (which drops the gone pids from the list) exits, or until
:func:`stop_embedded` (``cyclone-flow embedded stop``) stops it.

:func:`embedded_info` reads what is there without starting or joining anything: the
``postmaster.pid`` file Postgres writes in its data folder (pid, socket folder, port,
status) and pgserver's list of the processes using the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclone_flow.errors import EmbeddedInUseError
from cyclone_flow.errors import EmbeddedUnavailableError as EmbeddedUnavailableError

_servers: dict[Path, object] = {}

USERS_FILE = ".handle_pids.json"
"""pgserver's list of the pids using a server, in its data folder."""


def cyclone_home() -> Path:
    """``$CYCLONE_HOME`` or ``./.cyclone``, absolute."""
    return Path(os.environ.get("CYCLONE_HOME") or ".cyclone").resolve()


def embedded_exists(home: Path | None = None) -> bool:
    """Whether ``home`` holds an embedded database already (an initialised
    ``pgdata``): :func:`embedded_url` would join it rather than create a new, empty one."""
    return ((home or cyclone_home()).resolve() / "pgdata" / "PG_VERSION").is_file()


def other_homes(start: Path | None = None) -> list[Path]:
    """The ``.cyclone`` folders holding an embedded database in the parents of ``start``
    (default: the current folder), nearest first: where a user who ran a command from a
    subfolder probably meant to be."""
    here = (start or Path.cwd()).resolve()
    return [p / ".cyclone" for p in here.parents if embedded_exists(p / ".cyclone")]


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise EmbeddedUnavailableError(
            "no --database-url or CYCLONE_DATABASE_URL given, and the embedded Postgres "
            "is not installed: pip install 'cyclone-flow[embedded]'"
        ) from None
    return pgserver


def embedded_url(home: Path | None = None) -> str:
    """Start or join the embedded server under ``home`` and return its connection URL.

    Raises :class:`EmbeddedUnavailableError` when pgserver is not installed or the server
    cannot start (its log is named in the message).
    """
    home = (home or cyclone_home()).resolve()
    pgdata = home / "pgdata"
    server = _servers.get(pgdata)
    if server is None:
        pgserver = _pgserver()
        home.mkdir(parents=True, exist_ok=True)
        logging.getLogger("pgserver").setLevel(logging.WARNING)
        try:
            _forget_gone_users(pgserver, pgdata)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = pgserver.get_server(pgdata, cleanup_mode="stop")
        except Exception as exc:
            raise EmbeddedUnavailableError(
                f"the embedded Postgres in {pgdata} did not start ({exc}); see {pgdata / 'log'}"
            ) from exc
        _servers[pgdata] = server
    return str(server.get_uri())  # type: ignore[attr-defined]


def _forget_gone_users(pgserver: Any, pgdata: Path) -> None:
    """Drop the pids of gone processes (killed ones: they never removed themselves) from
    pgserver's list of the server's users, under pgserver's lock. pgserver stops the
    server when the last process on the list exits: a dead pid left there would keep it
    running for good."""
    if not (pgdata / USERS_FILE).exists():
        return
    with pgserver.PostgresServer._lock:
        users = _users(pgdata)
        alive = [pid for pid in users if _alive(pid)]
        if alive != users:
            (pgdata / USERS_FILE).write_text(json.dumps(alive), "utf-8")


@dataclass(frozen=True)
class EmbeddedInfo:
    """What :func:`embedded_info` found under a ``home`` folder.

    - ``home``, ``data_dir`` (``home/pgdata``); ``exists``: a database was initialised there
    - ``pid``: the postmaster's pid when a server runs on that data folder, else None
    - ``url``: its connection URL (database ``postgres``) when it runs, else None
    - ``status``: Postgres's own word in ``postmaster.pid`` (``ready``, ``starting``,
      ``stopping``) when it runs, else None
    - ``users``: pids on pgserver's list that are alive (the cyclone-flow processes using
      the server); ``stale_users``: pids on it that are gone (killed processes, which keep
      a server from stopping by itself)
    """

    home: Path
    data_dir: Path
    exists: bool
    pid: int | None
    url: str | None
    status: str | None
    users: tuple[int, ...]
    stale_users: tuple[int, ...]

    @property
    def running(self) -> bool:
        """Whether a server runs on the data folder."""
        return self.pid is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user (the server under root)
        return True
    return True


def _postmaster(data_dir: Path) -> tuple[int, str, str] | None:
    """``(pid, url, status)`` of the postmaster whose ``postmaster.pid`` is in
    ``data_dir`` and who is alive, else None. The file's lines (PostgreSQL's
    ``postmaster.pid``): pid, data folder, start time, port, socket folder, listen
    address, shared memory key, status."""
    try:
        lines = (data_dir / "postmaster.pid").read_text("utf-8").splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0 or not _alive(pid):
        return None
    port = lines[3].strip() if len(lines) > 3 else ""
    sockets = lines[4].strip() if len(lines) > 4 else ""
    host = lines[5].strip() if len(lines) > 5 else ""
    status = lines[7].strip() if len(lines) > 7 else ""
    if sockets:
        url = f"postgresql://postgres:@/postgres?host={sockets}"
        if port and port != "5432":
            url += f"&port={port}"
    else:
        url = f"postgresql://postgres:@{host or 'localhost'}:{port or 5432}/postgres"
    return pid, url, status


def _users(data_dir: Path) -> list[int]:
    try:
        values = json.loads((data_dir / USERS_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return []
    return [v for v in values if isinstance(v, int)] if isinstance(values, list) else []


def embedded_info(home: Path | None = None) -> EmbeddedInfo:
    """The state of the embedded Postgres under ``home`` (default :func:`cyclone_home`),
    read from its files: nothing is started, joined or written; pgserver need not be
    installed."""
    home = (home or cyclone_home()).resolve()
    data_dir = home / "pgdata"
    found = _postmaster(data_dir)
    users = _users(data_dir)
    return EmbeddedInfo(
        home=home,
        data_dir=data_dir,
        exists=embedded_exists(home),
        pid=found[0] if found else None,
        url=found[1] if found else None,
        status=found[2] if found else None,
        users=tuple(p for p in users if _alive(p)),
        stale_users=tuple(p for p in users if not _alive(p)),
    )


def stop_embedded(
    home: Path | None = None, *, force: bool = False, timeout: float = 60.0
) -> EmbeddedInfo:
    """Stop the embedded server under ``home`` (``pg_ctl stop -m fast``: open sessions
    are ended, committed data is kept) and empty pgserver's list of its users, so the
    next command starts it afresh. Returns what was found before (not running: nothing
    is done).

    Raises :class:`EmbeddedInUseError` when live processes are on the list of users and
    ``force`` is False (they would lose their connections), and
    :class:`EmbeddedUnavailableError` when pgserver is not installed or ``pg_ctl`` fails.
    """
    info = embedded_info(home)
    if not info.running:
        return info
    users = tuple(p for p in info.users if p != os.getpid())
    if users and not force:
        raise EmbeddedInUseError(info.data_dir, users)
    pgserver = _pgserver()
    # pgserver runs the server as the user "pgserver" when started by root (pg_ctl
    # refuses root); stopping it takes the same user
    user = "pgserver" if os.name == "posix" and os.geteuid() == 0 else None
    with pgserver.PostgresServer._lock:  # pgserver's own lock: no start or join meanwhile
        try:
            pgserver.pg_ctl(
                ["-w", "-m", "fast", "stop"], pgdata=info.data_dir, user=user, timeout=timeout
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            if _postmaster(info.data_dir) is not None:
                raise EmbeddedUnavailableError(
                    f"the embedded Postgres in {info.data_dir} did not stop ({exc}); "
                    f"see {info.data_dir / 'log'}"
                ) from exc
        with contextlib.suppress(OSError):  # the server is stopped all the same
            (info.data_dir / USERS_FILE).write_text("[]", "utf-8")
    return info
