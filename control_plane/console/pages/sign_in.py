"""Signing in and out: an admin token exchanged for a session cookie, or a one-time link.

The token is checked exactly as the API checks it; the session is bound to
it. Failed sign-ins answer the same page with the same words whatever was
wrong, and say nothing about which tokens exist.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromQuery
from litestar.response import Redirect, Template

from control_plane.access import ANY_CALLER
from control_plane.auth import (
    authenticate,
    authenticate_session,
    check_token_attempts,
    client_address,
)
from control_plane.console.guard import COOKIE, cookie_is_secure, session_hash
from control_plane.console.rendering import public_page
from control_plane.console.sessions import end_session, open_session, redeem_sign_in_link
from control_plane.deps import Caller, CrankState
from control_plane.errors import TooManyAttempts, Unauthorized
from shared.keys import KeyKind, parse_key

HOME = "/ui/"


class SignInForm(msgspec.Struct, kw_only=True):
    token: Annotated[str, msgspec.Meta(max_length=200)] = ""
    next: Annotated[str, msgspec.Meta(max_length=2000)] = ""


def _safe_next(target: str) -> str:
    """Only a path inside the console: never another site (an open redirect)."""
    if target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return HOME


def _session_cookie(request: Request[Any, Any, Any], app_state: CrankState, value: str) -> Cookie:
    settings = app_state.settings
    return Cookie(
        key=COOKIE,
        value=value,
        path="/ui",
        max_age=settings.console_session_ttl_s,
        httponly=True,
        samesite="strict",
        secure=cookie_is_secure(request, settings),
    )


async def _signed_in(
    request: Request[Any, Any, Any], app_state: CrankState, token_id: int, target: str
) -> Redirect:
    async with app_state.pool.connection() as conn:
        opened = await open_session(conn, token_id, app_state.settings.console_session_ttl_s)
    return Redirect(
        _safe_next(target),
        status_code=303,
        cookies=[_session_cookie(request, app_state, opened.cookie)],
    )


async def _has_live_session(request: Request[Any, Any, Any], app_state: CrankState) -> bool:
    """Whether the request carries the cookie of a session that is still valid."""
    try:
        cookie_hash = session_hash(request)
        async with app_state.pool.connection() as conn:
            await authenticate_session(conn, app_state, cookie_hash)
    except Unauthorized:
        return False
    return True


@get("/sign-in", sync_to_thread=False)
def sign_in_page(next: FromQuery[str] = "") -> Template:
    return public_page("sign_in.html", next=_safe_next(next), error="")


@post("/sign-in")
async def sign_in(
    request: Request[Any, Any, Any],
    app_state: CrankState,
    data: Annotated[SignInForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Response[Any]:
    token = data.token.strip()
    client = client_address(request)
    try:
        if parse_key(token) is not KeyKind.ADMIN:
            raise Unauthorized("not an admin token")
        check_token_attempts(app_state, client)
        async with app_state.pool.connection() as conn:
            principal = await authenticate(conn, app_state, token, client)
    except TooManyAttempts as refused:
        return public_page(
            "sign_in.html",
            status_code=refused.status_code,
            headers={"Retry-After": str(refused.retry_after_s)},
            next=_safe_next(data.next),
            error=f"Too many failed sign-ins from your address: try again in {refused.retry_after_s} seconds.",
        )
    except Unauthorized:
        return public_page(
            "sign_in.html",
            status_code=401,
            next=_safe_next(data.next),
            error="That token is not a valid admin token (unknown, revoked or expired).",
        )
    return await _signed_in(request, app_state, principal.token_id, data.next)


@get("/sign-in/link")
async def sign_in_with_link(
    request: Request[Any, Any, Any], app_state: CrankState, code: FromQuery[str] = ""
) -> Response[Any]:
    token_id = None
    if 0 < len(code) <= 100:
        async with app_state.pool.connection() as conn:
            token_id = await redeem_sign_in_link(conn, code)
    if token_id is None:
        if await _has_live_session(request, app_state):
            return Redirect(HOME, status_code=303)  # a link opened again: already signed in
        return public_page(
            "sign_in.html",
            status_code=401,
            next=HOME,
            error="That sign-in link was already used or has expired: sign in with your token.",
        )
    return await _signed_in(request, app_state, token_id, HOME)


@post("/sign-out", access=ANY_CALLER)
async def sign_out(
    request: Request[Any, Any, Any], principal: Caller, app_state: CrankState
) -> Redirect:
    del principal  # admission checked the session and the CSRF token
    async with app_state.pool.connection() as conn:
        await end_session(conn, request.cookies.get(COOKIE, ""))
    response = Redirect("/ui/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


handlers: list[Any] = [sign_in_page, sign_in, sign_in_with_link, sign_out]
