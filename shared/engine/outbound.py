"""The upstream HTTP executor: one per process, sending through pyreqwest (reqwest,
in Rust) clients pinned to the addresses the guard allowed (shared.engine.pinning).

Used by the upstream step (``CompiledOperation.call``) of the gateway's
tools/call, its approval worker and the control plane's try-it. Exceptions,
each named after its error code (``code``; shared.engine.upstream turns them into
tool errors, in one place) and saying whether the request can have reached
the upstream (``delivery``, which the idempotency memory needs)::

    OutboundError                   code                                delivery
    ├── UpstreamTimeout             upstream_timeout (recoverable)      unknown
    ├── UpstreamUnavailable         upstream_unavailable (recoverable): not_sent if the only
    │                               connect errors                      attempt was refused
    ├── UpstreamBlocked             upstream_blocked: SSRF guard, bad   not_sent on the
    │                               redirect scheme                     first attempt
    ├── UpstreamResponseTooLarge    upstream_response_too_large: raw    answered
    │                               body limit
    └── UpstreamResponseInvalid     upstream_response_invalid:          answered
                                    unparsable HTTP, redirect loop

(``delivery`` is ``unknown`` wherever the table does not say otherwise.)

An HTTP answer of any status (also 429 and 5xx once retries are exhausted) is
returned as an ``UpstreamResponse``; turning statuses into codes is the caller's.

Decisions: see ``_redirect`` (redirect rules) and ``retry_safe`` / ``execute``
(retry rules); the guard is ``_hop`` with shared.engine.pinning: Crank resolves
the host itself, judges every address (with the calling workspace's egress
policy, ``UpstreamRequest.egress``, too) for every hop, and reqwest connects
only to an allowed address, never resolving or following redirects itself.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import ipaddress
import random
import time
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, ClassVar, Literal

from pyreqwest.exceptions import ConnectError, NetworkError, RequestError
from pyreqwest.http import Url
from yarl import URL

from shared.backoff import equal_jitter
from shared.engine.answer_limits import DEFAULT_MAX_JSON_NODES
from shared.engine.egress import Blocked, EgressPolicy
from shared.engine.errors import ErrorCode
from shared.engine.pinning import (
    AddressRefused,
    CachingResolver,
    ClientCache,
    ConnectCheck,
    HostSlots,
    Resolver,
    SystemResolver,
    allowed_addresses,
)
from shared.engine.ssrf import AddressPolicy

if TYPE_CHECKING:
    from pyreqwest.client import Client
    from pyreqwest.response import Response

    from shared.settings import Settings

__all__ = [
    "Delivery",
    "ExecutorConfig",
    "OutboundError",
    "Resolver",
    "UpstreamBlocked",
    "UpstreamExecutor",
    "UpstreamRequest",
    "UpstreamResponse",
    "UpstreamResponseInvalid",
    "UpstreamResponseTooLarge",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "parse_retry_after",
    "retry_safe",
]


# Whether a failed request can have reached the upstream: never sent, answered
# (unusably), or unknown (it may be running there now).
Delivery = Literal["not_sent", "answered", "unknown"]


class OutboundError(Exception):
    """The upstream call failed before an HTTP answer could be returned."""

    code: ClassVar[ErrorCode] = "internal_error"

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts

    @property
    def delivery(self) -> Delivery:
        return "unknown"


class UpstreamTimeout(OutboundError):
    code = "upstream_timeout"


class UpstreamUnavailable(OutboundError):
    code = "upstream_unavailable"

    @property
    def delivery(self) -> Delivery:
        # Only a refused connect on the only attempt proves nothing was sent (a
        # resolver failure or the connect check is an OSError before any connect).
        cause = self.__cause__
        refused = isinstance(cause, ConnectError) or (
            isinstance(cause, OSError) and not isinstance(cause, TimeoutError)
        )
        return "not_sent" if self.attempts == 1 and refused else "unknown"


class UpstreamBlocked(OutboundError):
    code = "upstream_blocked"

    def __init__(self, message: str, *, attempts: int = 1, blocked: Blocked | None = None) -> None:
        super().__init__(message, attempts=attempts)
        self.blocked = blocked  # which policy layer refused; None: the URL itself

    @property
    def delivery(self) -> Delivery:
        return "not_sent" if self.attempts == 1 else "unknown"


class UpstreamResponseTooLarge(OutboundError):
    code = "upstream_response_too_large"

    @property
    def delivery(self) -> Delivery:
        return "answered"


class UpstreamResponseInvalid(OutboundError):
    code = "upstream_response_invalid"

    @property
    def delivery(self) -> Delivery:
        return "answered"


Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamRequest:
    """One request for ``UpstreamExecutor.execute``, with its own timeout and retry budget."""

    method: str
    url: str  # already encoded (the compiler builds it)
    headers: Headers = ()
    body: bytes | None = None
    timeout_ms: int = 10_000  # per attempt
    retries: int = 2  # extra attempts where repeating is safe
    idempotency_header: str | None = None  # its presence makes POST/PATCH retry-safe
    # This call's raw body limit (the operation's); the executor's ceiling caps it.
    max_response_bytes: int | None = None
    egress: EgressPolicy | None = None  # the calling workspace's; None: the operator's alone


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamResponse:
    """An answer of any status, also 429 or 5xx once retries ran out; ``attempts`` >= 1."""

    status: int
    headers: Headers
    body: bytes
    elapsed_ms: float
    attempts: int
    url: str  # the final URL, after redirects

    def header(self, name: str) -> str | None:
        lname = name.lower()
        return next((v for k, v in self.headers if k.lower() == lname), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorConfig:
    """Limits of one executor, for every call it makes; per-call ones are in ``UpstreamRequest``."""

    limit: int = 200  # requests (so connections) in flight in total
    limit_per_host: int = 20  # one slow upstream cannot take more than this
    max_clients: int = 256  # pinned clients kept (one per host, port and address)
    # The ceiling of every call's raw body limit (not response.max_bytes).
    max_response_bytes: int = 10 * 1024 * 1024
    # JSON values and keys one answer may decode to; read by the upstream step's
    # selection (docs/architecture.md, "Upstream answers").
    max_json_nodes: int = DEFAULT_MAX_JSON_NODES
    max_redirects: int = 5
    retry_after_cap_s: float = 10.0
    backoff_base_s: float = 0.1
    backoff_cap_s: float = 2.0
    user_agent: str = "Crank"

    @classmethod
    def from_settings(cls, settings: Settings) -> ExecutorConfig:
        """The answer limits the deployment set (``CRANK_UPSTREAM_MAX_*``)."""
        return cls(
            max_response_bytes=settings.upstream_max_response_bytes,
            max_json_nodes=settings.upstream_max_json_nodes,
        )


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# 500 too: a transient server fault is the commonest 5xx, and only retry-safe
# requests are ever repeated (as the AWS and Google client libraries do); 501,
# 505 and the rest say the same call will fail again.
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Headers kept on a redirect to another origin; credentials and anything custom drop.
_CROSS_ORIGIN_HEADERS = frozenset(
    {"accept", "accept-language", "content-language", "content-type", "user-agent"}
)
_MIN_ATTEMPT_S = 0.05  # no retry that would leave less than this for the attempt


def retry_safe(request: UpstreamRequest) -> bool:
    """GET/HEAD/OPTIONS/PUT/DELETE, or POST/PATCH carrying the idempotency header."""
    if request.method.upper() in _SAFE_METHODS:
        return True
    if request.idempotency_header is None:
        return False
    name = request.idempotency_header.lower()
    return any(k.lower() == name and v for k, v in request.headers)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


class UpstreamExecutor:
    """One per process: ``await executor.start()`` in the lifespan, ``close()`` on shutdown.

    ``resolver`` answers host names (the system's by default; its answers are cached
    ``pinning.DNS_TTL_S``); ``connect_check`` is asked before a client pinned to an
    allowed address is built (tests: loopback only).
    """

    def __init__(
        self,
        policy: AddressPolicy,
        config: ExecutorConfig | None = None,
        *,
        resolver: Resolver | None = None,
        connect_check: ConnectCheck | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self.config = config or ExecutorConfig()
        self._resolver = CachingResolver(resolver or SystemResolver())
        self._connect_check = connect_check
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not crypto
        self._clients: ClientCache | None = None
        self._slots = HostSlots(total=self.config.limit, per_host=self.config.limit_per_host)

    async def start(self) -> None:
        self._clients = ClientCache(
            size=self.config.max_clients,
            per_host=self.config.limit_per_host,
            user_agent=self.config.user_agent,
            connect_check=self._connect_check,
        )

    async def close(self) -> None:
        if self._clients is not None:
            await self._clients.close()
            self._clients = None

    async def __aenter__(self) -> UpstreamExecutor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def execute(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send ``request``; retries (only if ``retry_safe``) on connect errors,
        timeouts, 429 and 500/502/503/504, within ``timeout_ms * (retries + 1)``;
        every address it connects to is judged by ``request.egress`` too."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        per_attempt = request.timeout_ms / 1000
        deadline = started + per_attempt * (request.retries + 1)
        max_attempts = request.retries + 1 if retry_safe(request) else 1
        attempt = 0
        while True:
            attempt += 1
            remaining = deadline - loop.time()
            budget = min(per_attempt, remaining)
            try:
                # reqwest gets the same deadline: a cancelled await alone would leave
                # the Rust request running (docs/architecture.md, "Outbound calls").
                async with asyncio.timeout(budget):
                    status, headers, body, url = await self._follow(request, loop.time() + budget)
            except TimeoutError as exc:
                error: OutboundError = UpstreamTimeout(
                    f"no answer within {request.timeout_ms} ms", attempts=attempt
                )
                error.__cause__ = exc
                wait = self._backoff(attempt)
            except (NetworkError, OSError) as exc:  # OSError: the resolver, the connect check
                error = UpstreamUnavailable(
                    f"cannot reach upstream: {_reason(exc)}", attempts=attempt
                )
                error.__cause__ = exc
                wait = self._backoff(attempt)
            except RequestError as exc:
                raise UpstreamResponseInvalid(
                    f"unusable upstream answer: {_reason(exc)}", attempts=attempt
                ) from exc
            except OutboundError as exc:
                exc.attempts = attempt
                raise
            else:
                response = UpstreamResponse(
                    status=status,
                    headers=headers,
                    body=body,
                    elapsed_ms=(loop.time() - started) * 1000,
                    attempts=attempt,
                    url=url,
                )
                if status not in _RETRY_STATUSES or attempt >= max_attempts:
                    return response
                wait = self._backoff(attempt)
                retry_after = parse_retry_after(response.header("Retry-After"))
                if retry_after is not None:
                    if retry_after > self.config.retry_after_cap_s:
                        return response  # the caller reports retry_after_s to the model
                    wait = max(wait, retry_after)
                if deadline - loop.time() - wait < _MIN_ATTEMPT_S:
                    return response
                await asyncio.sleep(wait)
                continue
            if attempt >= max_attempts or deadline - loop.time() - wait < _MIN_ATTEMPT_S:
                raise error
            await asyncio.sleep(wait)

    def raw_limit(self, request: UpstreamRequest) -> int:
        """The raw body limit of ``request``: its own, capped by the executor's ceiling."""
        ceiling = self.config.max_response_bytes
        own = request.max_response_bytes
        return ceiling if own is None else min(own, ceiling)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with equal jitter: half fixed, half random."""
        config = self.config
        return equal_jitter(
            attempt, base_s=config.backoff_base_s, cap_s=config.backoff_cap_s, rng=self._rng
        )

    async def _follow(
        self, request: UpstreamRequest, deadline: float
    ) -> tuple[int, Headers, bytes, str]:
        method, url, headers, body = (
            request.method.upper(),
            URL(request.url, encoded=True),
            request.headers,
            request.body,
        )
        _check_scheme(url)
        limit = self.raw_limit(request)
        for _hop in range(self.config.max_redirects + 1):
            answer = await self._hop(method, url, headers, body, request.egress, deadline, limit)
            if not isinstance(answer, _Redirect):
                return (*answer, str(url))
            method, url, headers, body = _redirect(
                answer.status, method, url, headers, body, answer.location
            )
        raise UpstreamResponseInvalid(f"more than {self.config.max_redirects} redirects")

    async def _hop(
        self,
        method: str,
        url: URL,
        headers: Headers,
        body: bytes | None,
        egress: EgressPolicy | None,
        deadline: float,
        limit: int,
    ) -> tuple[int, Headers, bytes] | _Redirect:
        """One request: its answer (status, headers, body), or the redirect to follow.

        The host reqwest will connect to is read with reqwest's own URL parser, so
        the guard judges exactly what is dialled; each allowed address is tried in
        turn while connects are refused."""
        if self._clients is None:
            raise RuntimeError("UpstreamExecutor.start() was not awaited")
        target = _target(url)
        domain, port = target.domain, target.port_or_known_default or 0
        host = domain or (target.host_str or "").strip("[]")
        if egress is not None and not egress.allows_host(host):
            raise UpstreamBlocked(egress.refusal(host), blocked=Blocked.not_listed(host, port))
        found = [host] if domain is None else await self._resolver.resolve(domain, port)
        try:
            addresses = allowed_addresses(self.policy, egress, found, host=host, port=port)
        except AddressRefused as exc:
            raise UpstreamBlocked(str(exc), blocked=exc.blocked) from exc
        key = (target.scheme, host, port)
        per_host = self._slots.enter(key)
        try:
            async with per_host, self._slots.total:
                for index, ip in enumerate(addresses):
                    pinned = None
                    try:
                        pinned = self._clients.acquire(target.scheme, domain, ip, port)
                        return await _send(
                            pinned.client, method, target, headers, body, deadline, limit
                        )
                    except TimeoutError:
                        raise
                    except (ConnectError, OSError):  # OSError: the connect check refused
                        if index == len(addresses) - 1:
                            raise
                    finally:
                        if pinned is not None:
                            self._clients.release(pinned)
        finally:
            self._slots.leave(key)
        raise AssertionError("unreachable: allowed_addresses returns at least one")


async def _send(
    client: Client,
    method: str,
    target: Url,
    headers: Headers,
    body: bytes | None,
    deadline: float,
    limit: int,
) -> tuple[int, Headers, bytes] | _Redirect:
    builder = client.request(method, target).headers(list(headers))
    if body is not None:
        builder = builder.body_bytes(body)
    wait = max(deadline - asyncio.get_running_loop().time(), 0.001)
    async with builder.timeout(timedelta(seconds=wait)).build_streamed() as resp:
        location = resp.get_header("location")
        if resp.status in _REDIRECTS and location:
            return _Redirect(resp.status, location)
        raw = await _read_limited(resp, limit)
        return resp.status, tuple(resp.headers.items()), raw


@dataclass(frozen=True, slots=True)
class _Redirect:
    status: int
    location: str


def _target(url: URL) -> Url:
    try:
        return Url(str(url))
    except ValueError as exc:
        raise UpstreamBlocked(f"not a URL Crank can call: {exc}") from exc


def _reason(exc: Exception) -> str:
    """The innermost cause pyreqwest reports ("Connection refused (os error 111)",
    "invalid HTTP version parsed"), never the URL: reqwest's outer causes say
    "error sending request for url (...)", whose path and query hold the call's
    argument values, and the reason reaches the call log, approval records and
    logs (docs/security.md, "What logs never hold")."""
    details = getattr(exc, "details", None)
    causes = details.get("causes") if isinstance(details, dict) else None
    message = str(causes[-1]["message"]) if causes else str(exc)
    return message.split(" for url (", 1)[0]


def _check_scheme(url: URL) -> None:
    if url.scheme not in ("http", "https") or not url.host:
        raise UpstreamBlocked(f"only http and https URLs are allowed, got {url.scheme!r}")
    # A host of digits and dots that is no dotted quad (2130706433, 127.1,
    # 0177.0.0.1) is IPv4 in a legacy notation that socket libraries map onto an
    # address (reqwest's URL parser too); it is an address trick, so the guard
    # refuses it rather than judging the address it stands for.
    host = url.host
    if host.replace(".", "").isdigit() and not _dotted_quad(host):
        raise UpstreamBlocked(f"{host!r} is not a canonical IPv4 address")


@functools.lru_cache(maxsize=1024)  # a pure function of the host text: no allow decision
def _dotted_quad(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)  # refuses leading zeros, short and long forms
    except ValueError:
        return False
    return True


def _redirect(
    status: int, method: str, url: URL, headers: Headers, body: bytes | None, location: str
) -> tuple[str, URL, Headers, bytes | None]:
    """The next hop, as the Fetch standard has it (and httpx): 303 turns every
    method but HEAD into a bodiless GET, 301/302 turn POST into GET, 307/308
    keep method and body. A hop to another origin keeps only content-neutral
    headers (no credentials, no custom headers); https → http is refused."""
    target = url.join(URL(location))
    _check_scheme(target)
    if url.scheme == "https" and target.scheme == "http":
        raise UpstreamBlocked("redirect from https to http refused")
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
        headers = tuple((k, v) for k, v in headers if k.lower() != "content-type")
    if target.origin() != url.origin():
        headers = tuple((k, v) for k, v in headers if k.lower() in _CROSS_ORIGIN_HEADERS)
    return method, target, headers, body


async def _read_limited(resp: Response, limit: int) -> bytes:
    """At most ``limit`` bytes of the (decoded) body, else ``UpstreamResponseTooLarge``.

    A Content-Length over the limit is refused before reading (reqwest drops the
    header from an answer it decompresses); otherwise one read of ``limit + 1``
    decoded bytes, which reqwest gathers until the body ends or that many arrived."""
    too_large = UpstreamResponseTooLarge(f"upstream body exceeds {limit} bytes")
    length = resp.get_header("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large
    raw = await resp.body_reader.read(limit + 1)
    if raw is None:
        return b""
    if len(raw) > limit:
        raise too_large
    return raw.to_bytes()
