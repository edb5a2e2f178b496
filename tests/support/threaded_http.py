"""HTTP servers on 127.0.0.1 served from a thread of their own: Litestar's test
client runs the app through a portal that blocks the test's event loop while a
request is in flight, so an upstream the app calls cannot run on that loop."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ThreadedServer(ThreadingHTTPServer):
    """A server on a free loopback port; handlers append to ``hits``."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.hits: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def serve_threaded(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadedServer]:
    """``handler`` served for the block."""
    server = ThreadedServer(handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class JsonHandler(BaseHTTPRequestHandler):
    """Answers every request with ``{"method": ..., "path": ...}`` and records it."""

    server: ThreadedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        self.server.hits.append(f"{self.command} {self.path}")
        raw = json.dumps({"method": self.command, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer
