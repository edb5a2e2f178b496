"""Rendering a console page: the template, the context every page shares, the headers.

Every page extends ``base.html``, which needs the caller, the session's CSRF
token (htmx sends it as ``X-CSRF-Token`` with every request; plain forms
carry ``_csrf``), the workspaces for the switcher and the current one. An
htmx request for a fragment gets only the fragment's template.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.response import Template

from control_plane.admission import admitted
from control_plane.auth import Principal, Role, Workspace

# A page's own scripts and styles only; htmx is told not to inject its indicator
# styles (base.html), so no inline style or script is needed anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# An htmx answer that belongs in the page's message region, not the element that asked.
TO_MESSAGES = {"HX-Retarget": "#messages", "HX-Reswap": "innerHTML"}


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    return request.headers.get("hx-request") == "true"


def wants_fragment(request: Request[Any, Any, Any], target: str | None = None) -> bool:
    """An htmx swap (of the region ``target``, when one is named); a history restore
    (back button, nothing cached) needs the whole page."""
    return (
        is_htmx(request)
        and request.headers.get("hx-history-restore-request") != "true"
        and (target is None or request.headers.get("hx-target") == target)
    )


def may_write(ws: Workspace | None, need: Role = Role.EDITOR) -> bool:
    """Whether to show write controls; the routes check again, whatever the page showed."""
    return ws is not None and ws.role >= need


def page(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Template:
    """``template`` rendered with the shared context; ``context`` adds the page's own."""
    found = admitted(request)
    principal: Principal = found.principal
    ws = found.workspace
    shared = {
        "principal": principal,
        "csrf": found.csrf or "",
        "ws": ws,
        "can_edit": may_write(ws, Role.EDITOR),
        "can_own": may_write(ws, Role.OWNER),
        "Role": Role,
        "request_path": request.url.path,
    }
    return Template(
        template_name=template,
        context={**shared, **context},
        status_code=status_code,
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


def public_page(
    template: str, *, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any
) -> Template:
    """A page shown without a session (sign-in, errors before admission)."""
    return Template(
        template_name=template,
        context={"principal": None, "csrf": "", "ws": None, **context},
        status_code=status_code,
        headers={**SECURITY_HEADERS, **(headers or {})},
    )
