"""Console sign-in: sessions and one-time sign-in links (docs/architecture.md, "The console").

The browser holds a random 256-bit value; the database holds its SHA-256,
so a leaked table opens nothing. A session is bound to the admin token it
was opened with (``authenticate_session`` re-checks that token on every
request) and carries its own CSRF token, which every write sends back.
A sign-in link (``crank up`` prints one) is a single-use code that opens a
session for its token; using it deletes it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from shared.crypto import KeyHasher
from shared.db import Connection

SIGN_IN_LINK_TTL_S = 600


def value_hash(value: str) -> bytes:
    """What the database stores for a cookie or link value."""
    return hashlib.sha256(value.encode()).digest()


@dataclass(frozen=True, slots=True)
class OpenedSession:
    cookie: str  # the value of the session cookie, given to the browser only
    csrf: str


async def open_session(conn: Connection, token_id: int, ttl_s: int) -> OpenedSession:
    cookie = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    await conn.execute(
        """INSERT INTO console_sessions (hash, token_id, csrf, expires_at)
           VALUES (%s, %s, %s, now() + make_interval(secs => %s))""",
        (value_hash(cookie), token_id, csrf, ttl_s),
    )
    return OpenedSession(cookie=cookie, csrf=csrf)


async def end_session(conn: Connection, cookie: str) -> None:
    await conn.execute("DELETE FROM console_sessions WHERE hash = %s", (value_hash(cookie),))


async def create_sign_in_link(
    conn: Connection, token_id: int, ttl_s: int = SIGN_IN_LINK_TTL_S
) -> str:
    """A single-use code that signs in as ``token_id``'s holder within ``ttl_s``."""
    code = secrets.token_urlsafe(32)
    await conn.execute(
        """INSERT INTO console_sign_in_links (hash, token_id, expires_at)
           VALUES (%s, %s, now() + make_interval(secs => %s))""",
        (value_hash(code), token_id, ttl_s),
    )
    return code


async def sign_in_link_for_token(
    conn: Connection, hasher: KeyHasher, token: str, ttl_s: int = SIGN_IN_LINK_TTL_S
) -> str | None:
    """A sign-in link code for the holder of admin ``token``; None when it is unknown."""
    cur = await conn.execute("SELECT id FROM admin_tokens WHERE hash = %s", (hasher.hash(token),))
    row = await cur.fetchone()
    return None if row is None else await create_sign_in_link(conn, row["id"], ttl_s)


async def redeem_sign_in_link(conn: Connection, code: str) -> int | None:
    """The token id behind a live link, which is used up; None for any other code."""
    cur = await conn.execute(
        "DELETE FROM console_sign_in_links WHERE hash = %s RETURNING token_id, expires_at > now() AS live",
        (value_hash(code),),
    )
    row = await cur.fetchone()
    if row is None or not row["live"]:
        return None
    token_id: int = row["token_id"]
    return token_id
