"""The dashboard behind a real server: uvicorn on a free loopback port (in a thread, or the
real ``cyclone-flow ui``) and raw HTTP, where a TestClient would hide the framing: the
``Host`` check against DNS rebinding, the body limit on a chunked request, and the
command's exit on SIGTERM / SIGINT (deregistered from the embedded Postgres)."""

from __future__ import annotations

import functools
import http.client
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import clean_env, run_cli
from helpers.paths import CLI
from helpers.procs import wait_until

pytest.importorskip("uvicorn", reason="the ui extra is not installed")

from cyclone_flow import Client
from cyclone_flow.embedded import embedded_info
from cyclone_flow.flowfile import load_flow_text
from cyclone_flow.ui import create_app
from cyclone_flow.ui.app import MAX_BODY_BYTES

WAITS = """
name: waits
nodes:
  approve:
    type: wait_signal
    signal: go
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(client: Client, **options: Any) -> Iterator[int]:
    """``create_app(client, **options)`` served by uvicorn on 127.0.0.1 in a thread; yields
    its port."""
    import uvicorn

    sock = socket.socket()
    # small kernel buffers (accepted sockets inherit them): what the client has sent is
    # close to what the server has read
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(client, **options), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, what="uvicorn to start")
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _ask(
    port: int, method: str, path: str, host: str, body: str | None = None, **headers: str
) -> tuple[int, str]:
    """One request to 127.0.0.1:``port`` with ``Host: host``: (status, body text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        sent = {"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}}
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def _token(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no form token on the page"
    return match.group(1)


def test_a_foreign_host_gets_no_page_and_no_action(make_client: Callable[..., Client]) -> None:
    """DNS rebinding: a page of attacker.example whose name resolves to 127.0.0.1 sends
    ``Host: attacker.example:PORT`` (and a matching ``Origin``): refused before any page,
    so neither the runs nor the form token leak, and no action is taken."""
    client = make_client()
    run_id = client.submit(load_flow_text(WAITS), {"secret": "s3cret-input"})
    with serve(client) as port:
        for bound in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            status, page = _ask(port, "GET", f"/runs/{run_id}", bound)
            assert status == 200 and 'name="csrf"' in page, bound
        token = _token(page)
        foreign = f"attacker.example:{port}"
        for path in ("/", f"/runs/{run_id}", f"/runs/{run_id}/input.json", "/static/ui.css"):
            status, text = _ask(port, "GET", path, foreign)
            assert status == 400, path
            assert text == "invalid Host header: not a host this server answers\n", path
        status, text = _ask(
            port,
            "POST",
            f"/runs/{run_id}/cancel",
            foreign,
            body=f"csrf={token}&confirmed=1",
            Origin=f"http://{foreign}",
            Sec_Fetch_Site="same-origin",
        )
        assert status == 400 and token not in text
        assert client.get_run(run_id).state == "running"  # no action
        # the same POST from a bound host is the dashboard's own: it acts
        status, _ = _ask(
            port,
            "POST",
            f"/runs/{run_id}/cancel",
            f"localhost:{port}",
            body=f"csrf={token}&confirmed=1",
            Origin=f"http://localhost:{port}",
        )
        assert status == 303
        assert client.get_run(run_id).state == "cancelled"


def test_with_a_token_trusted_hosts_name_the_proxy(make_client: Callable[..., Client]) -> None:
    client = make_client()
    auth = {"Authorization": "Bearer t0ken"}
    with serve(client, auth_token="t0ken") as port:  # a token alone: any Host
        assert _ask(port, "GET", "/", "flows.example.com", **auth)[0] == 200
        assert _ask(port, "GET", "/", "flows.example.com")[0] == 401
    with serve(client, auth_token="t0ken", trusted_hosts=["flows.example.com"]) as port:
        assert _ask(port, "GET", "/", "flows.example.com", **auth)[0] == 200
        assert _ask(port, "GET", "/", "FLOWS.example.com:443", **auth)[0] == 200
        status, text = _ask(port, "GET", "/", "other.example", **auth)
        assert status == 400 and "<html" not in text


def test_a_chunked_body_over_the_limit_is_refused_while_it_is_sent(
    make_client: Callable[..., Client],
) -> None:
    """No Content-Length: the limit holds on the bytes read. 36 MB offered in 64 KiB
    chunks: the 413 arrives before 2 MiB are sent (before the fix the whole body
    was read and parsed, then answered 403 for the missing form token)."""
    client = make_client()
    run_id = client.submit(load_flow_text(WAITS), {})
    total, chunk = 36 * 1024 * 1024, b"a=" + b"x" * (64 * 1024 - 2)
    with serve(client) as port, socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(10)
        sock.sendall(
            (
                f"POST /runs/{run_id}/cancel HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\n"
                "Transfer-Encoding: chunked\r\n\r\n"
            ).encode()
        )
        sent = 0
        while sent < total:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answers while the body is still coming
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError, TimeoutError):
                break  # it has answered and closed the connection
            sent += len(chunk)
        if sent >= total:
            sock.sendall(b"0\r\n\r\n")
        reply = _read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
    assert f"request body over {MAX_BODY_BYTES} bytes".encode() in reply
    assert sent < 2 * MAX_BODY_BYTES, sent  # of 36 MB offered
    assert client.get_run(run_id).state == "running"


def _stream_chunks(sock: socket.socket, head: str, total: int) -> int:
    """Send ``head`` then a chunked body of up to ``total`` bytes in 64 KiB chunks,
    stopping as soon as the server answers or closes; the bytes of body sent."""
    chunk = b"a=" + b"x" * (64 * 1024 - 2)
    sock.sendall(head.encode())
    sent = 0
    while sent < total:
        if select.select([sock], [], [], 0)[0]:
            break  # the server answers while the body is still coming
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            break  # it has answered and closed the connection
        sent += len(chunk)
    return sent


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the server closes ``sock`` (after its reply) within ``timeout`` seconds,
    while this side sends nothing more."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize(
    ("what", "path", "host", "status", "options"),
    [
        ("refused Host", "/runs", "attacker.example", 400, {}),
        ("no credentials", "/runs", None, 401, {"auth_token": "t0ken"}),
        ("no such path", "/no/such/page", None, 404, {}),
        ("no such method", "/runs", None, 405, {}),
    ],
)
def test_a_refusal_before_the_body_closes_the_connection(
    make_client: Callable[..., Client],
    what: str,
    path: str,
    host: str | None,
    status: int,
    options: dict[str, Any],
) -> None:
    """A refusal sent before the body is read says ``Connection: close`` and the server
    closes: before the fix it kept the connection alive and read (and dropped) a chunked
    body of any size, with no 413."""
    client = make_client()
    with serve(client, **options) as port, socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(10)
        sent = _stream_chunks(
            sock,
            f"POST {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            "Transfer-Encoding: chunked\r\n\r\n",
            36 * 1024 * 1024,
        )
        reply = _read_reply(sock)
        assert reply.startswith(b"HTTP/1.1 %d " % status), (what, reply[:200])
        head = reply.partition(b"\r\n\r\n")[0]
        assert re.search(rb"(?im)^connection: *close\r?$", head), (what, head)
        assert _closed(sock), f"{what}: the connection is kept alive, the body read on"
    assert sent < 2 * MAX_BODY_BYTES, (what, sent)


def test_the_body_limit_comes_before_the_host_check(make_client: Callable[..., Client]) -> None:
    """A body announced over the limit is answered 413 whatever else is wrong (a refused
    Host): the limit is the outermost check (before the fix: 400, the body read on)."""
    client = make_client()
    with serve(client) as port, socket.socket() as sock:
        sock.connect(("127.0.0.1", port))
        sock.settimeout(10)
        sock.sendall(
            b"POST /runs HTTP/1.1\r\nHost: attacker.example\r\n"
            b"Content-Length: 300000000\r\n\r\n" + b"x" * 65536
        )
        reply = _read_reply(sock)
        assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
        assert _closed(sock)


def _read_reply(sock: socket.socket) -> bytes:
    """The response on ``sock``: its head and its body (by its Content-Length)."""
    reply = b""
    while True:
        head, sep, body = reply.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        if sep and length and len(body) >= int(length.group(1)):
            return reply
        try:
            more = sock.recv(65536)
        except ConnectionResetError:
            return reply
        if not more:
            return reply
        reply += more


def _ui(folder: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``cyclone-flow ui`` on the embedded Postgres of ``folder / "home"``, its stderr
    written to ``log``."""
    with log.open("wb") as err:
        return subprocess.Popen(
            [str(CLI), "ui", "--port", str(port), "--trusted-host", "proxy.example"],
            cwd=folder,
            env=clean_env(CYCLONE_HOME=str(folder / "home")),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


@pytest.mark.db  # starts an embedded server of its own
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_stops_on_a_signal_deregistered_from_the_embedded_postgres(signum: int) -> None:
    # a folder of its own under /tmp: pgserver (as root) opens it to its user "pgserver",
    # and pytest's base folder may be closed again by another session meanwhile
    with tempfile.TemporaryDirectory(prefix="cyclone-test-ui-") as tmp:
        _stop_the_cli(Path(tmp), signum)


def _stop_the_cli(tmp_path: Path, signum: int) -> None:
    migrate = run_cli("migrate", cwd=tmp_path, env=clean_env(CYCLONE_HOME=str(tmp_path / "home")))
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    log = tmp_path / "ui.log"
    proc = _ui(tmp_path, port, log)
    try:

        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return _ask(port, "GET", "/runs", f"127.0.0.1:{port}")[0] == 200
            except OSError:
                return False

        wait_until(up, timeout=120, interval=0.2, what="cyclone-flow ui to serve")
        # the hosts of the bound address and --trusted-host's are answered, any other (or
        # another port) is not
        for host in (f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}", "proxy.example"):
            assert _ask(port, "GET", "/", host)[0] == 200, host
        for host in (f"attacker.example:{port}", f"127.0.0.1:{port + 1}", "localhost", ""):
            assert _ask(port, "GET", "/", host)[0] == 400, host
        home = tmp_path / "home"
        assert proc.pid in embedded_info(home).users
        os.kill(proc.pid, signum)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert "Traceback" not in err and "Aborted" not in err, err
    info = embedded_info(home)
    assert proc.pid not in info.users + info.stale_users
    assert not info.running  # it was the only user: the server stopped with it


def _runs_python_code(pid: int) -> bool:
    """Whether process ``pid`` got past the interpreter's own start-up: it catches SIGTERM
    (``SigCgt``: the entry point's handler) or has psycopg loaded (the package's imports
    are under way)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1))) or "psycopg" in maps


def _default_sigint() -> None:
    """In the child before exec: SIGINT with its default action, as a terminal's
    foreground job has it (a suite started in the background ignores it, and an ignored
    signal stays ignored across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_cli_starts_is_a_quiet_stop(
    database_url: str, schema: str, tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C while ``cyclone-flow ui`` imports (about 0.5 s) or opens its client (1.5 s)
    exits 0, as a stop while serving does, with no traceback and no "Aborted!" (before
    the fix: a KeyboardInterrupt traceback from the imports, or click's "Aborted!" and
    exit 1). The signal goes ``delay`` seconds after the entry point runs Python code of
    its own; whatever phase it lands in, the exit is the same."""
    for i, delay in enumerate((0.0, 0.2, 0.5, 1.0, 1.5)):
        log = tmp_path / f"ui{i}.log"
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [
                    str(CLI),
                    "ui",
                    "--port",
                    str(_free_port()),
                    "--database-url",
                    database_url,
                    "--schema",
                    schema,
                ],
                env=clean_env(),
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=_default_sigint,
            )
        try:
            wait_until(functools.partial(_runs_python_code, proc.pid), 10, 0.002, "the entry point")
            time.sleep(delay)
            proc.send_signal(signum)
            code = proc.wait(timeout=30)
            text = log.read_text()
            assert code == 0, f"{signum.name} {delay}s after the entry point: exit {code}\n{text}"
            assert "Traceback" not in text and "Aborted" not in text, text
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
