"""A local HTTP server that counts the requests it gets: proof that nothing was fetched."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class CountingServer:
    """``url``: the server's base URL; ``requests``: the paths asked for, in order."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.requests: list[str] = []


@contextmanager
def counting_server(body: bytes = b'{"type": "string"}') -> Iterator[CountingServer]:
    """Serve ``body`` (JSON) for every GET on 127.0.0.1 (a free port) in a thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    counted = CountingServer(f"http://127.0.0.1:{server.server_address[1]}")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            counted.requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield counted
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
