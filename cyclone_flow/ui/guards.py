"""ASGI guards of the dashboard's server, reusable by any other app on it (a JSON API):
:class:`TrustedHosts` (the ``Host`` header, against DNS rebinding) and :class:`BodyLimit`
(the request body's size, counted on the bytes read whatever the framing).

DNS rebinding: a page of ``attacker.example`` whose name then resolves to 127.0.0.1 reaches
a loopback server as the same origin, with ``Host: attacker.example``. Without an
authentication token the server must answer only the names it is really reached by
(:func:`bound_hosts`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["LOOPBACK_HOSTS", "BodyLimit", "TrustedHosts", "bound_hosts", "check_host_pattern"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
"""The names of this machine a browser sends as ``Host`` for a loopback server."""


_HOST = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::(?P<port>[^:]*))?")
"""``host[:port]``, lower case: a DNS name of ``[a-z0-9-]`` labels (an IPv4 address is
one), or a bracketed IPv6 literal (checked by :mod:`ipaddress` after the match); the
port is any text without ``:`` here, checked by the caller."""
_NAME = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")


def _split(value: str) -> tuple[str, str | None] | None:
    """A ``Host`` value ``host[:port]`` (``[v6]:port`` for IPv6) as ``(host, port or
    None)``, lower case; None when it is none (``evil.com/.example.com``, ``[::1]x``,
    ``[::1``, a bad IPv6 literal)."""
    match = _HOST.fullmatch(value.strip().lower())
    if match is None:
        return None
    host = match["host"]
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None
    return host, match["port"]


def check_host_pattern(pattern: str) -> str:
    """``pattern`` checked and normalised (lower case): ``*`` (any host), ``*.example.com``
    (its subdomains, any port), a name or an address (any port) or ``name:port`` (that
    port only; ``[::1]:8080`` for IPv6, ``::1`` is taken as ``[::1]``). A name is made of
    ``[A-Za-z0-9-]`` labels. Raises ValueError naming what is wrong."""
    text = pattern.strip().lower()
    if text == "*":
        return text
    if text.startswith("*."):
        if not _NAME.fullmatch(text[2:]):
            raise ValueError(
                f"trusted host {pattern!r}: *.domain takes a DNS name ([A-Za-z0-9-] "
                "labels separated by dots) and no port"
            )
        return text
    if text.count(":") > 1 and not text.startswith("["):  # a bare IPv6 address
        try:
            return f"[{ipaddress.IPv6Address(text).compressed}]"
        except ValueError:
            pass
    parts = _split(text)
    if parts is None:
        raise ValueError(
            f"trusted host {pattern!r}: a name, an address, name:port, *.domain or * "
            "(a name of [A-Za-z0-9-] labels separated by dots, IPv6 in brackets)"
        )
    host, port = parts
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"trusted host {pattern!r}: the port must be a number from 1 to 65535")
    return host + (f":{port}" if port else "")


def bound_hosts(host: str, port: int) -> list[str]:
    """The ``Host`` values of a server bound to ``host`` (a name or an address; ``::1``
    without brackets) on ``port``: the loopback names and ``host``, each with the port
    (with port 80 also without it, as a browser sends it then)."""
    named = host.lower()
    if ":" in named and not named.startswith("["):
        named = f"[{named}]"
    hosts: list[str] = []
    for name in (*LOOPBACK_HOSTS, named):
        for value in (f"{name}:{port}", *((name,) if port == 80 else ())):
            if value not in hosts:
                hosts.append(value)
    return hosts


class TrustedHosts:
    """Answer 400 (a one-line text, no page) to a request whose ``Host`` header matches
    none of ``hosts`` (patterns of :func:`check_host_pattern`; ``*`` turns the check off);
    a request without ``Host`` is refused too. Websocket requests are closed (1008)."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.any = False
        self.exact: set[str] = set()  # "name:port"
        self.names: set[str] = set()  # any port
        self.suffixes: list[str] = []  # ".example.com"
        for pattern in hosts:
            text = check_host_pattern(pattern)
            if text == "*":
                self.any = True
            elif text.startswith("*."):
                self.suffixes.append(text[1:])
            elif ":" not in text.rpartition("]")[2]:
                self.names.add(text)
            else:
                self.exact.add(text)

    def trusted(self, value: str) -> bool:
        """Whether a ``Host`` header value is one of the trusted hosts."""
        if self.any:
            return True
        parts = _split(value)
        if parts is None:
            return False  # not a host[:port] at all
        host, port = parts
        if port is not None and not port.isdigit():
            return False
        if host in self.names or f"{host}:{port}" in self.exact:
            return True
        return any(host.endswith(s) for s in self.suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.any:
            await self.app(scope, receive, send)
            return
        given = [v for k, v in scope.get("headers") or [] if k == b"host"]
        if len(given) == 1 and self.trusted(given[0].decode("latin-1")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        # closed: the body (if any) is not read, the server does not read it to go on
        await _text(send, 400, b"invalid Host header: not a host this server answers\n", close=True)


class _TooLarge(Exception):
    """The body went past the limit: the 413 is sent, the app is stopped."""


class BodyLimit:
    """Answer 413 to a request whose body is over ``max_bytes``: at once when its
    ``Content-Length`` says so (or is not a number), else as soon as the bytes read
    (``http.request`` messages, chunked or not) pass it; the app never gets them and
    what it would send is dropped. Bytes not read yet are not read.

    Put it outermost (before the ``Host`` check, authentication, routing): a response
    started while the request's body is not read to its end (a refusal: 400, 401, 404,
    405, ...) gets ``Connection: close``, so the server stops reading the connection
    instead of reading and dropping the rest of the body to keep it alive."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body over {self.max_bytes} bytes\n".encode()
        lengths = [v for k, v in scope.get("headers") or [] if k == b"content-length"]
        if any(not v.isdigit() or int(v) > self.max_bytes for v in lengths):
            await _text(send, 413, message, close=True)
            return
        headers = scope.get("headers") or []
        has_body = any(k == b"transfer-encoding" for k, _ in headers) or any(
            int(v) > 0 for v in lengths
        )
        state = {"read": 0, "started": False, "refused": False, "done": not has_body}

        async def counted_receive() -> Message:
            got = await receive()
            if got["type"] == "http.request":
                state["read"] += len(got.get("body", b""))
                if not got.get("more_body", False):
                    state["done"] = True
                if state["read"] > self.max_bytes:
                    if not state["started"]:
                        state["refused"] = True
                        await _text(send, 413, message, close=True)
                    raise _TooLarge
            return got

        async def guarded_send(out: Message) -> None:
            if state["refused"]:
                return  # the 413 went out instead
            if out["type"] == "http.response.start":
                state["started"] = True
                given = list(out.get("headers") or [])
                if not state["done"] and not any(k.lower() == b"connection" for k, _ in given):
                    out = {**out, "headers": [*given, (b"connection", b"close")]}
            await send(out)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except _TooLarge:
            pass
        except Exception:
            if not state["refused"]:
                raise  # an error of the app's own


async def _text(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    headers: Sequence[tuple[bytes, bytes]] = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers = [*headers, (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})
