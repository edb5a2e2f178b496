"""Fixtures of the console tests: one chromium per module (tests/support/browser.py),
and the in-process ``client`` that does not follow redirects (a console answer's
redirect is what many tests assert). The control plane served by granian
(``server``) comes from the parent conftest."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar import Litestar
from playwright.async_api import Browser

from tests.support.api import Client
from tests.support.browser import launch_browser


@pytest.fixture
async def client(app: Litestar, database_url: str) -> AsyncIterator[Client]:
    async with Client(app=app) as test_client:
        test_client.follow_redirects = False
        yield test_client


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with launch_browser() as launched:
        yield launched
