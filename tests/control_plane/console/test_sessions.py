"""Console sign-in, sessions and the checks on every console write, over HTTP in process."""

from __future__ import annotations

import asyncio

from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from control_plane.console.sessions import create_sign_in_link
from shared.db import connect
from shared.settings import Settings
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import csrf_of, sign_in
from tests.support.db import TEST_SECRET_KEY


def _cookie_header(answer_headers: list[tuple[str, str]]) -> str:
    cookies = [value for name, value in answer_headers if name.lower() == "set-cookie"]
    assert len(cookies) == 1, cookies
    return cookies[0]


async def test_sign_in_with_an_admin_token_sets_a_strict_http_only_cookie(
    client: Client, admin_token: str
) -> None:
    answer = await client.post("/ui/sign-in", data={"token": admin_token, "next": "/ui/"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/"
    cookie = _cookie_header(answer.headers.multi_items()).lower()
    assert cookie.startswith("crank_console=")
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/ui" in cookie
    assert "secure" not in cookie  # plain http: a Secure cookie would never come back
    home = await client.get("/ui/")
    assert home.status_code == 200
    assert "Workspaces" in home.text


async def test_a_wrong_token_gets_the_sign_in_page_again_and_no_cookie(
    client: Client, admin_token: str
) -> None:
    for wrong in ("crk_admin_nope", admin_token[:-2] + "xx", "", "not a token at all"):
        answer = await client.post("/ui/sign-in", data={"token": wrong})
        assert answer.status_code == 401
        assert "set-cookie" not in answer.headers
        assert "not a valid admin token" in answer.text


async def test_the_cookie_is_secure_when_the_setting_says_always(database_url: str) -> None:
    app = create_app(
        Settings(
            database_url=database_url,
            secret_key=TEST_SECRET_KEY,
            console_cookie_secure="always",
        )
    )
    token = await make_token(database_url, "admin")
    async with AsyncTestClient(app=app) as secure_client:
        secure_client.follow_redirects = False
        answer = await secure_client.post("/ui/sign-in", data={"token": token})
        assert answer.status_code == 303
        assert "secure" in _cookie_header(answer.headers.multi_items()).lower()


async def test_a_page_without_a_session_redirects_to_sign_in(client: Client) -> None:
    answer = await client.get("/ui/w/default/")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/sign-in?next=/ui/w/default"
    partial = await client.get("/ui/w/default/", headers={"HX-Request": "true"})
    assert partial.status_code == 204
    assert partial.headers["hx-redirect"] == "/ui/sign-in?next=/ui/w/default"
    client.cookies.set("crank_console", "made-up")
    assert (await client.get("/ui/")).status_code == 303


async def test_next_never_leads_out_of_the_console(client: Client, admin_token: str) -> None:
    for target in ("https://evil.example/", "//evil.example/ui/", "/api/v1/workspaces", "/ui\\x"):
        answer = await client.post("/ui/sign-in", data={"token": admin_token, "next": target})
        assert answer.status_code == 303, (target, answer.text[:300])
        assert answer.headers["location"] == "/ui/"


async def test_a_write_without_the_session_csrf_token_is_refused(
    client: Client, admin_token: str
) -> None:
    csrf = await sign_in(client, admin_token)
    refused = await client.post("/ui/sign-out", data={})
    assert refused.status_code == 403
    wrong = await client.post("/ui/sign-out", data={"_csrf": csrf[:-1]})
    assert wrong.status_code == 403
    assert (await client.get("/ui/")).status_code == 200  # still signed in
    by_header = await client.post("/ui/sign-out", headers={"X-CSRF-Token": csrf})
    assert by_header.status_code == 303


async def test_a_cross_site_write_is_refused_even_with_the_token(
    client: Client, admin_token: str
) -> None:
    csrf = await sign_in(client, admin_token)
    for headers in (
        {"Origin": "https://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        answer = await client.post("/ui/sign-out", data={"_csrf": csrf}, headers=headers)
        assert answer.status_code == 403, headers
    cross_sign_in = await client.post(
        "/ui/sign-in", data={"token": admin_token}, headers={"Origin": "https://evil.example"}
    )
    assert cross_sign_in.status_code == 403


async def test_a_console_write_takes_only_a_small_form(client: Client, admin_token: str) -> None:
    csrf = await sign_in(client, admin_token)
    as_json = await client.post(
        "/ui/sign-out", json={"_csrf": csrf}, headers={"X-CSRF-Token": csrf}
    )
    assert as_json.status_code == 400
    huge = await client.post(
        "/ui/sign-out", data={"_csrf": csrf, "pad": "x" * 1_100_000}, headers={"X-CSRF-Token": csrf}
    )
    assert huge.status_code == 413


async def test_signing_out_ends_the_session_on_the_server(client: Client, admin_token: str) -> None:
    csrf = await sign_in(client, admin_token)
    cookie = client.cookies["crank_console"]
    answer = await client.post("/ui/sign-out", data={"_csrf": csrf})
    assert answer.status_code == 303
    client.cookies.set("crank_console", cookie)
    replayed = await client.get("/ui/")
    assert replayed.status_code == 303  # the old cookie, sent again, opens nothing


async def test_revoking_the_admin_token_ends_its_sessions(
    client: Client, admin_token: str, database_url: str
) -> None:
    user = await make_token(database_url, "admin", name="soon revoked")
    await sign_in(client, user)
    async with await connect(database_url) as conn:
        await conn.execute("UPDATE admin_tokens SET revoked_at = now() WHERE name = 'soon revoked'")
        await conn.commit()
    assert (await client.get("/ui/")).status_code == 303


async def test_an_expired_session_is_refused(
    client: Client, admin_token: str, database_url: str
) -> None:
    await sign_in(client, admin_token)
    async with await connect(database_url) as conn:
        await conn.execute("UPDATE console_sessions SET expires_at = now() - interval '1 second'")
        await conn.commit()
    assert (await client.get("/ui/")).status_code == 303


async def test_a_sign_in_link_signs_in_once(client: Client, database_url: str) -> None:
    await make_token(database_url, "admin", name="linked")
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id FROM admin_tokens WHERE name = 'linked'")
        row = await cur.fetchone()
        assert row is not None
        code = await create_sign_in_link(conn, row["id"])
        expired = await create_sign_in_link(conn, row["id"], ttl_s=0)
        await conn.commit()
    await asyncio.sleep(0.01)
    assert (await client.get(f"/ui/sign-in/link?code={expired}")).status_code == 401
    first = await client.get(f"/ui/sign-in/link?code={code}")
    assert first.status_code == 303
    assert (await client.get("/ui/")).status_code == 200
    client.cookies.clear()
    again = await client.get(f"/ui/sign-in/link?code={code}")
    assert again.status_code == 401
    assert "already used or has expired" in again.text


async def test_console_pages_carry_a_strict_content_security_policy(
    client: Client, admin_token: str
) -> None:
    await create_workspace(client, admin_token, "csp")
    await create_workspace(client, admin_token, "csp-two")
    await sign_in(client, admin_token)
    for path in ("/ui/sign-in", "/ui/", "/ui/w/csp"):
        answer = await client.get(path)
        assert answer.status_code == 200, path
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert answer.headers["x-content-type-options"] == "nosniff"


async def test_a_viewer_sees_its_workspace_and_no_other(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "mine")
    await create_workspace(client, admin_token, "theirs")
    viewer = await make_token(database_url, "viewer", workspace="mine")
    await sign_in(client, viewer)
    home = await client.get("/ui/")
    assert home.status_code == 303
    assert home.headers["location"] == "/ui/w/mine"
    overview = await client.get("/ui/w/mine/")
    assert overview.status_code == 200
    assert "viewer" in overview.text
    other = await client.get("/ui/w/theirs/")
    assert other.status_code == 404
    assert "text/html" in other.headers["content-type"]
    assert csrf_of(overview.text)


async def test_a_bearer_token_is_no_console_credential_nor_a_cookie_an_api_one(
    client: Client, admin_token: str
) -> None:
    await sign_in(client, admin_token)
    assert (await client.get("/api/v1/workspaces")).status_code == 401
    client.cookies.clear()
    assert (await client.get("/ui/", headers=auth(admin_token))).status_code == 303
