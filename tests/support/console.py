"""Signing in to the web console from a test: the in-process client or a real browser."""

from __future__ import annotations

import html
import re

from playwright.async_api import Page

from tests.support.api import Client

_CSRF = re.compile(r'name="_csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    """The session's CSRF token as a page carries it (every signed-in page has one)."""
    found = _CSRF.search(html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def hidden_value(page_html: str, name: str) -> str:
    """The value of the page's first hidden input ``name`` (e.g. the ETag a form carries)."""
    found = re.search(rf'type="hidden" name="{re.escape(name)}" value="([^"]*)"', page_html)
    assert found, f"the page has no hidden {name!r} field"
    return html.unescape(found.group(1))


async def sign_in(client: Client, token: str) -> str:
    """Signs ``client`` in with ``token`` (the cookie stays in the client); returns the
    session's CSRF token."""
    answer = await client.post("/ui/sign-in", data={"token": token, "next": "/ui/"})
    assert answer.status_code == 303, answer.text
    home = await client.get("/ui/", follow_redirects=True)
    assert home.status_code == 200, home.text
    return csrf_of(home.text)


async def browser_sign_in(page: Page, base_url: str, token: str) -> None:
    """Signs in through the sign-in form, as a person does."""
    await page.goto(f"{base_url}/ui/sign-in")
    await page.get_by_label("Admin token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(re.compile(r".*/ui/(w/[^/]+)?$"))
