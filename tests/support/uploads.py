"""Hostile uploads on a raw socket: a large body the server should refuse
without reading, and the answer it gives while the upload is still going.

A plain socket, not asyncio streams: when the server answers and closes
while the client is still sending, the send fails (EPIPE) but the answer
is already in the kernel's receive buffer; asyncio drops it with the
transport, a socket can still read it."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_OBJECTS = b"{}," * 21_845  # 64 KiB less one byte
ANSWER_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class UploadAnswer:
    status: int
    body: Any  # the decoded JSON answer
    sent: int  # body bytes the client handed to its socket before the answer came


def _parsed(raw: bytes) -> tuple[int, Any] | None:
    """(status, JSON body) once ``raw`` holds a whole answer, else None."""
    head, found, rest = raw.partition(b"\r\n\r\n")
    if not found:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    if len(rest) < length:
        return None
    return int(lines[0].split()[1]), json.loads(rest[:length]) if length else None


def empty_objects(size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of one valid JSON array ``[{},{},...]`` in pieces of
    about 64 KiB, made as they are sent: what blew the control plane up, every
    three bytes decoding to a dictionary of its own."""
    count, pad = divmod(size - 4, 3)
    full, rest = divmod(count, len(_OBJECTS) // 3)
    yield b"["
    for _ in range(full):
        yield _OBJECTS
    yield b"{}," * rest + b"{}]" + b" " * pad


def _frames(size: int, send: int | None, chunked: bool) -> Iterator[bytes]:
    """The body as it goes on the wire, cut after ``send`` bytes when given."""
    left = size if send is None else send
    for piece in empty_objects(size):
        piece = piece[:left]
        left -= len(piece)
        if piece:
            yield b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
        if not left:
            break
    if chunked and send is None:
        yield b"0\r\n\r\n"


def _upload(host: str, port: int, head: bytes, frames: Iterator[bytes]) -> UploadAnswer:
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    answer = b""
    sent = 0
    with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        pending = memoryview(b"")
        while (parsed := _parsed(answer)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer within {ANSWER_TIMEOUT_S} s; {sent} bytes sent")
            if not pending:
                pending = memoryview(next(frames, b""))
            readable, writable, _ = select.select([sock], [sock] if pending else [], [], remaining)
            if writable:
                try:
                    count = sock.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    pending, frames = memoryview(b""), iter(())  # the server stopped reading
                else:
                    sent += count
                    pending = pending[count:]
            if readable:
                try:
                    data = sock.recv(65_536)
                except ConnectionResetError:
                    data = b""
                if not data:
                    raise ConnectionError(f"closed without a whole answer: {answer[:200]!r}")
                answer += data
    status, body = parsed
    return UploadAnswer(status, body, sent)


async def upload(
    url: str,
    path: str,
    *,
    size: int,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    chunked: bool = False,
    send: int | None = None,
) -> UploadAnswer:
    """Announce a ``size``-byte JSON body of ``[{},{},...]`` (``empty_objects``), or
    send it chunked, and read the answer, on a thread of its own.

    With ``send``, only that many body bytes are sent, then the client waits:
    an answer proves the server did not wait for the rest. Without it, the
    client keeps sending the whole body until the server answers. ``sent``
    counts framing bytes too for a chunked body."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n{extra}\r\n"
    ).encode("latin-1")
    frames = _frames(size, send, chunked)
    return await asyncio.to_thread(_upload, host, port, head, frames)
