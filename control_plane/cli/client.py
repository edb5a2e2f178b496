"""A small synchronous client of the admin API for the CLI (stdlib ``urllib``).

Where it connects, first match wins:

- URL: ``CRANK_URL``; else ``http://127.0.0.1:$CRANK_CONTROL_PLANE_PORT`` when
  that is set; else the URL ``crank up`` saved in its dev state; else
  ``http://127.0.0.1:8000``.
- Token: ``CRANK_TOKEN``; else the dev admin token ``crank up`` saved, but only
  for a loopback URL, so the local token is never sent to another host.

Loopback URLs bypass ``http_proxy``; redirects are not followed (they would
carry the token to wherever the redirect points). Every failure becomes one
line in a ``CliError``: connection refused, a refused token, or the server's
error body ``{code, message, errors}``. A server that refuses a body it will
not read (401, or 413 over its size limit) answers at once and closes the
connection while the upload is still going: the client stops sending and
reads that answer instead of reporting a broken pipe. ``validation_failed`` and
``lint_failed`` answers carry their field errors (and the linter's
``findings``) and exit code 1; everything else exits 2.
"""

from __future__ import annotations

import http.client
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import IO, TYPE_CHECKING, Any

import msgspec

from control_plane.cli.common import CliError
from control_plane.lint import Finding
from shared.engine.spec_validation import FieldError

if TYPE_CHECKING:
    from control_plane.cli.devstate import DevState

API_PREFIX = "/api/v1"
DEFAULT_TIMEOUT_S = 60.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

_encoder = msgspec.json.Encoder()


class ApiError(CliError):
    """The control plane answered with an error status."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        errors: list[FieldError] | None = None,
        findings: list[Finding] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.errors = errors or []
        self.findings = findings or []
        exit_code = 1 if code in ("validation_failed", "lint_failed") else 2
        super().__init__(_describe(status, code, message), exit_code=exit_code)


class _ErrorBody(msgspec.Struct, kw_only=True):
    code: str = "http_error"
    message: str = ""
    errors: list[FieldError] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)


def _describe(status: int, code: str, message: str) -> str:
    if status == 401:
        return (
            f"the control plane refused the token (401 {code}: {message}); set CRANK_TOKEN "
            "to an admin token (crank tokens create --role admin)"
        )
    if status >= 500:
        return f"the control plane failed ({status} {code}): {message}"
    return f"{code} ({status}): {message}"


@dataclass(frozen=True, slots=True)
class ApiResponse:
    status: int
    body: Any


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None  # urllib then raises HTTPError with the 3xx status


class _AnswerFirst:
    """A connection that, when the server stops reading the body, stops sending
    it and lets ``getresponse`` read the answer the server sent before closing."""

    def send(self, data: Any) -> None:
        if getattr(self, "refused_body", False):
            return
        try:
            super().send(data)  # type: ignore[misc]
        except (BrokenPipeError, ConnectionResetError):
            self.refused_body = True


class _HTTPConnection(_AnswerFirst, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_AnswerFirst, http.client.HTTPSConnection):
    pass


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


def _is_loopback(url: str) -> bool:
    return (urllib.parse.urlsplit(url).hostname or "") in _LOOPBACK


def _dev_state() -> DevState | None:
    """``crank up``'s saved state, or None (also when that module is unavailable)."""
    try:
        from control_plane.cli.devstate import load_dev_state
    except ImportError:
        return None
    try:
        return load_dev_state()
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None  # unreadable or from another version: behave as if absent


def resolve_target(environ: dict[str, str] | None = None) -> tuple[str, str | None]:
    """(base URL, token or None) from the environment and the dev state."""
    env = dict(os.environ) if environ is None else environ
    state: DevState | None = None
    url = env.get("CRANK_URL", "").strip()
    if not url:
        port = env.get("CRANK_CONTROL_PLANE_PORT", "").strip()
        if port:
            url = f"http://127.0.0.1:{port}"
        else:
            state = _dev_state()
            url = (state.control_plane_url if state else "") or "http://127.0.0.1:8000"
    token = env.get("CRANK_TOKEN", "").strip() or None
    if token is None and _is_loopback(url):
        state = state or _dev_state()
        token = (state.admin_token if state else None) or None
    return url.rstrip("/"), token


class Client:
    """The admin API for the CLI; any failure raises one CliError (``from_env``: URL, token)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"CRANK_URL {base_url!r} is not an http(s) URL")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        handlers: list[urllib.request.BaseHandler] = [
            _NoRedirect(),
            _HTTPHandler(),
            _HTTPSHandler(),
        ]
        if _is_loopback(self.base_url):
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def from_env(cls, *, timeout: float = DEFAULT_TIMEOUT_S) -> Client:
        url, token = resolve_target()
        if token is None:
            raise CliError(
                f"no admin token for {url}: set CRANK_TOKEN (crank tokens create --role admin), "
                "or run crank up, which saves a dev token the CLI finds by itself"
            )
        return cls(url, token, timeout=timeout)

    def url(self, path: str, query: dict[str, str] | None = None) -> str:
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        return f"{self.base_url}{API_PREFIX}{path}{suffix}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
    ) -> ApiResponse:
        """Send one request; the decoded JSON answer, or ``ApiError``/``CliError``."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = _encoder.encode(body)
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked in __init__
            self.url(path, query), data=data, method=method, headers=headers
        )
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return ApiResponse(response.status, _decode(response.read()))
        except urllib.error.HTTPError as exc:
            with exc:
                raise _api_error(exc.code, exc.read(), exc.headers.get("Location")) from None
        except urllib.error.URLError as exc:
            raise CliError(self._unreachable(exc.reason, data)) from None
        except (TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            raise CliError(self._unreachable(exc, data)) from None

    def _unreachable(self, reason: object, body: bytes | None = None) -> str:
        if body and isinstance(reason, ConnectionResetError):  # RemoteDisconnected is one
            return (
                f"the control plane at {self.base_url} closed the connection while a "
                f"{len(body)}-byte body was being sent, without an answer; a body over its "
                "limit is refused this way (CRANK_MAX_BODY_BYTES, or CRANK_MAX_DOCUMENT_BYTES "
                "for apply and import-openapi, set on the control plane)"
            )
        if isinstance(reason, ConnectionRefusedError):
            why = "connection refused; is it running? (crank up, or set CRANK_URL)"
        elif isinstance(reason, TimeoutError):
            why = f"no answer within {self.timeout:g} s"
        elif isinstance(reason, socket.gaierror):
            why = f"unknown host ({reason.strerror})"
        else:
            why = str(getattr(reason, "strerror", None) or reason)
        return f"cannot reach the control plane at {self.base_url}: {why}"

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, query=query).body

    def post(self, path: str, body: Any, query: dict[str, str] | None = None) -> Any:
        return self.request("POST", path, body=body, query=query).body

    def put(self, path: str, body: Any) -> ApiResponse:
        return self.request("PUT", path, body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path).body


def segment(value: str) -> str:
    """One path segment, percent-encoded (a name can never reach another route)."""
    return urllib.parse.quote(value, safe="")


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise CliError(f"the control plane sent a non-JSON answer: {raw[:200]!r}") from None


def _api_error(status: int, raw: bytes, location: str | None) -> ApiError:
    if 300 <= status < 400:
        return ApiError(status, "redirect", f"redirected to {location}; check CRANK_URL")
    try:
        body = msgspec.json.decode(raw, type=_ErrorBody)
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = raw.decode("utf-8", "replace").strip().replace("\n", " ")[:200]
        return ApiError(status, "http_error", text or "no details")
    return ApiError(status, body.code, body.message, body.errors, body.findings)
