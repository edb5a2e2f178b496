"""How identity documents (JWKS, provider metadata) are fetched: one async callable.

The identity code takes a ``Fetch`` so it never builds an HTTP client of its
own; ``executor_fetch`` is the real one, through the outbound executor and so
through its SSRF guard (docs/architecture.md, "Outbound calls").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shared.engine.outbound import OutboundError, UpstreamExecutor, UpstreamRequest

Fetch = Callable[[str], Awaitable[bytes]]  # URL → the 200 answer's body, or FetchFailed
MAX_DOCUMENT_BYTES = 256 * 1024  # a JWKS of a hundred RSA keys is about 50 KiB


class FetchFailed(Exception):
    """The document could not be fetched (unreachable, refused, not 200)."""


def executor_fetch(
    executor: UpstreamExecutor, *, timeout_ms: int = 5_000, max_bytes: int = MAX_DOCUMENT_BYTES
) -> Fetch:
    """A ``Fetch`` over ``executor``: GET, JSON accepted, the answer size capped."""

    async def fetch(url: str) -> bytes:
        request = UpstreamRequest(
            method="GET",
            url=url,
            headers=(("accept", "application/json"),),
            timeout_ms=timeout_ms,
            retries=0,  # the JWKS cache's refetch interval is the retry
            max_response_bytes=max_bytes,
        )
        return await _body_of_200(executor, request)

    return fetch


Headers = tuple[tuple[str, str], ...]
# URL, form body, headers → the 200 answer's body, or FetchFailed.
Post = Callable[[str, bytes, Headers], Awaitable[bytes]]


def executor_post(
    executor: UpstreamExecutor, *, timeout_ms: int = 5_000, max_bytes: int = MAX_DOCUMENT_BYTES
) -> Post:
    """A ``Post`` of a form over ``executor`` (introspection), never retried."""

    async def post(url: str, body: bytes, headers: Headers) -> bytes:
        request = UpstreamRequest(
            method="POST",
            url=url,
            headers=(
                ("accept", "application/json"),
                ("content-type", "application/x-www-form-urlencoded"),
                *headers,
            ),
            body=body,
            timeout_ms=timeout_ms,
            retries=0,
            max_response_bytes=max_bytes,
        )
        return await _body_of_200(executor, request)

    return post


async def _body_of_200(executor: UpstreamExecutor, request: UpstreamRequest) -> bytes:
    try:
        response = await executor.execute(request)
    except OutboundError as exc:
        raise FetchFailed(f"{exc.code}: {exc}") from exc
    if response.status != 200:
        raise FetchFailed(f"HTTP {response.status}")
    return response.body
