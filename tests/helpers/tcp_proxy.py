"""A small TCP forwarder between clients and a Postgres, that can make connections
half-open: :meth:`TcpProxy.freeze` stops forwarding a connection's bytes in both
directions without closing anything, as a peer or a middlebox that went silent does (the
proxy's own sockets still acknowledge what the client sends, so no TCP timer fires)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

LISTEN = b"LISTEN cyclone_available"


@dataclass
class Pair:
    """One proxied connection: the client's socket, the upstream one, and what was seen."""

    client: socket.socket
    upstream: socket.socket
    listens: bool = False  # the client sent a LISTEN (a cyclone listener's connection)
    frozen: bool = False
    closed: bool = False


def _upstream_address(url: str) -> tuple[int, object]:
    info = psycopg.conninfo.conninfo_to_dict(url)
    host = str(info.get("host") or "/tmp")
    port = int(info.get("port") or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to the server of ``upstream_url`` (TCP or a Unix
    socket). :meth:`url` gives a URL through it; :meth:`close` ends every connection."""

    def __init__(self, upstream_url: str) -> None:
        self._upstream_url = upstream_url
        self._family, self._address = _upstream_address(upstream_url)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.pairs: list[Pair] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def url(self) -> str:
        """``upstream_url``'s user and database, through this proxy."""
        info = psycopg.conninfo.conninfo_to_dict(self._upstream_url)
        info.update(host="127.0.0.1", port=str(self.port))
        return psycopg.conninfo.make_conninfo("", **info)

    def freeze(self, which: Callable[[Pair], bool]) -> int:
        """Stop forwarding the open connections for which ``which(pair)`` holds; returns
        how many. Nothing is closed: their clients see a silent peer."""
        with self._lock:
            chosen = [p for p in self.pairs if not p.closed and which(p)]
            for pair in chosen:
                pair.frozen = True
        return len(chosen)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._stop.set()
        self._listener.close()
        with self._lock:
            for pair in self.pairs:
                _close(pair)
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.1)
                if not ready:
                    continue
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                upstream.connect(self._address)  # type: ignore[arg-type]
            except OSError:
                client.close()
                upstream.close()
                continue
            pair = Pair(client, upstream)
            with self._lock:
                self.pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: Pair) -> None:
        ends = {pair.client: pair.upstream, pair.upstream: pair.client}
        while not self._stop.is_set() and not pair.closed:
            if pair.frozen:
                self._stop.wait(0.05)  # silent: read nothing, send nothing, close nothing
                continue
            try:
                ready, _, _ = select.select(list(ends), [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        _close(pair)
                        return
                    if sock is pair.client and LISTEN in data:
                        pair.listens = True
                    ends[sock].sendall(data)
            except OSError:
                _close(pair)
                return


def _close(pair: Pair) -> None:
    pair.closed = True
    for sock in (pair.client, pair.upstream):
        with contextlib.suppress(OSError):
            sock.close()
