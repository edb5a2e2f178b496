"""What a console write answers around it: the confirmation page a destructive write
is asked on (a GET, then its POST), and the redirect after a write that names what
was done by a fixed word, never text from the request (docs/architecture.md,
"The console", Forms and writes)."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.response import Redirect, Template

from control_plane.console.rendering import page


def confirmation(
    request: Request[Any, Any, Any],
    *,
    heading: str,
    question: str,
    action: str,
    button: str,
    cancel: str,
    etag: str = "",
) -> Template:
    """The page that asks ``question``; its form posts to ``action``, with ``etag``
    (the revision the question was asked about) when the write takes If-Match."""
    return page(
        request,
        "confirm.html",
        heading=heading,
        question=question,
        action=action,
        button=button,
        cancel=cancel,
        etag=etag,
    )


def done(path: str, word: str) -> Redirect:
    """Post/Redirect/Get to ``path``, which looks ``word`` up in its own messages."""
    return Redirect(f"{path}?done={word}", status_code=303)
