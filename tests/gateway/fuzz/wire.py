"""A blocking HTTP client that sends exactly what the fuzzer drew: any method,
any header names and values (repeated, or none of the ones clients add), any
body bytes. ``http.client`` adds only Host and Content-Length itself.

It blocks the thread it runs in, so the fuzz tests drive it from plain
(synchronous) Hypothesis tests against a gateway process, with the echo
upstream served from a thread of its own (tests.gateway.fuzz.catalog).
"""

from __future__ import annotations

import contextlib
import http.client
from dataclasses import dataclass

Header = tuple[str, bytes]
TIMEOUT_S = 60.0  # one answer; generous for a loaded 2-core machine


class Sent:
    """One request as drawn. A plain class with a short repr: Hypothesis prints the
    failing case, and a dataclass would be printed field by field, 1 MiB bodies too."""

    __slots__ = ("body", "headers", "method", "opens_stream", "path")

    def __init__(
        self,
        method: str,
        path: str,
        headers: tuple[Header, ...],
        body: bytes,
        opens_stream: bool = False,  # a GET or subscriptions/listen: an answer that stays open
    ) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.opens_stream = opens_stream

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 2000 else self.body[:2000] + b"..."
        return f"Sent({self.method!r}, {self.path!r}, {self.headers!r}, {body!r})"

    def header(self, name: str) -> bytes | None:
        """The first value of ``name`` (as the gateway reads it), if sent."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case name -> value (the last of a repeated header)
    body: bytes
    streamed: bool  # an SSE stream that stays open: its body was not read

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def send(port: int, request: Sent, *, timeout_s: float = TIMEOUT_S) -> Answer:
    """``request`` to 127.0.0.1:``port`` on a connection of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.putrequest(request.method, request.path, skip_accept_encoding=True)
        for name, value in request.headers:
            connection.putheader(name, value)
        if request.body or request.method in ("POST", "PUT", "PATCH"):
            connection.putheader("Content-Length", str(len(request.body)))
        # An early refusal may answer and close before the whole body is read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.endheaders(request.body or None)
        response = connection.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        event_stream = headers.get("content-type", "").startswith("text/event-stream")
        if event_stream and request.opens_stream:
            # It stays open, and a GET stream may say nothing for many seconds:
            # its status and headers are the answer; hang up.
            return Answer(response.status, headers, b"", streamed=True)
        return Answer(response.status, headers, response.read(), streamed=False)
    finally:
        connection.close()
