"""Behind the proxies ``CRANK_TRUSTED_PROXIES`` names, a request's client address
and scheme are the ones they forwarded (docs/architecture.md, "Deployment").

Both processes wrap their ASGI app with granian's own rewrite: from a trusted
proxy, the client is the last ``X-Forwarded-For`` address that is not a
trusted proxy, and ``X-Forwarded-Proto`` sets the scheme (granian reads it
only beside ``X-Forwarded-For``, which nginx and ingress-nginx always send).
The gateway's per-address key look-up limit and the control plane's
per-address limit on failed admin tokens count by that address; the console
cookie's ``Secure`` flag (``CRANK_CONSOLE_COOKIE_SECURE=auto``) follows that
scheme. From any other peer the headers are ignored, so a client cannot
claim an address.
"""

from __future__ import annotations

from typing import TypeVar

from granian.utils.proxies import wrap_asgi_with_proxy_headers

App = TypeVar("App")  # an ASGI app; the wrapped one is called the same way


def behind_trusted_proxies(app: App, trusted_proxies: tuple[str, ...]) -> App:
    """``app``, reading the forwarded headers of ``trusted_proxies``; ``app`` itself
    when there are none."""
    if not trusted_proxies:
        return app
    wrapped: App = wrap_asgi_with_proxy_headers(app, list(trusted_proxies))
    return wrapped
