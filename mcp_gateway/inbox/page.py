"""Serving the approver inbox: one HTML page, its script and its stylesheet.

    GET {/mcp}/v1/{workspace}/{agent}/approvals/inbox            the page
    GET {/mcp}/v1/{workspace}/{agent}/approvals/inbox/inbox.js   its script
    GET {/mcp}/v1/{workspace}/{agent}/approvals/inbox/inbox.css  its stylesheet
    GET {/mcp}/v1/{workspace}/{agent}/approvals/inbox/favicon.svg its icon (no favicon.ico 404)

The files are the same for every agent and hold nothing of it: the page asks
for the approval key in the browser and calls the approval-key endpoints
(mcp_gateway.transport.approval_endpoints) with it, same-origin, so serving them needs
neither a key nor the database. The page names its files relative to its own
URL, so it works under any path prefix a proxy puts in front. Every answer
carries a strict Content-Security-Policy (docs/architecture.md, "The approver
inbox"): no inline script or style, nothing from another origin, no framing.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import NamedTuple

from mcp_gateway.transport.asgi import Scope, Send, respond
from mcp_gateway.transport.errors import ProtocolError

PATH = re.compile(
    r"^(?:/mcp)?/v1/[^/]+/[^/]+/approvals/inbox(?:/(inbox\.js|inbox\.css|favicon\.svg))?$"
)

# form-action 'none': the page posts no form (its buttons call fetch).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",  # the fragment names an approval; tell no one
    "Cache-Control": "no-store",
}


class StaticFile(NamedTuple):
    body: bytes
    content_type: str


def _load(name: str, content_type: str) -> StaticFile:
    return StaticFile((files("mcp_gateway.inbox") / "static" / name).read_bytes(), content_type)


# Read once at import: four small files, the same for every request.
FILES: dict[str | None, StaticFile] = {
    None: _load("inbox.html", "text/html; charset=utf-8"),
    "inbox.js": _load("inbox.js", "text/javascript; charset=utf-8"),
    "inbox.css": _load("inbox.css", "text/css; charset=utf-8"),
    "favicon.svg": _load("favicon.svg", "image/svg+xml"),
}


async def handle(scope: Scope, send: Send, match: re.Match[str]) -> None:
    """Answer a request on an inbox path (``match``: of ``PATH``)."""
    if scope["method"] != "GET":
        problem = ProtocolError(405, "use GET here")
        headers = {**SECURITY_HEADERS, "Allow": "GET"}
        await respond(send, 405, problem.problem_body(), headers=headers)
        return
    found = FILES[match[1]]
    await respond(send, 200, found.body, content_type=found.content_type, headers=SECURITY_HEADERS)
