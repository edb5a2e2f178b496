"""Fixtures of the console tests: one chromium per module (tests/support/browser.py),
and the in-process ``client`` that does not follow redirects (a console answer's
redirect is what many tests assert). The control plane served by granian
(``server``) comes from the parent conftest; ``egress_server`` is one that may call
the loopback ``upstream``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from litestar import Litestar
from playwright.async_api import Browser

from tests.support.api import Client
from tests.support.browser import launch_browser
from tests.support.cli import Server
from tests.support.control_plane_server import serve_control_plane
from tests.support.threaded_http import JsonHandler, ThreadedServer, serve_threaded


@pytest.fixture
async def client(app: Litestar, database_url: str) -> AsyncIterator[Client]:
    async with Client(app=app) as test_client:
        test_client.follow_redirects = False
        yield test_client


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with launch_browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def upstream() -> Iterator[ThreadedServer]:
    """A JSON upstream on loopback: answers ``{"method", "path"}`` to every request."""
    with serve_threaded(JsonHandler) as served:
        yield served


@pytest.fixture(scope="module")
def egress_server(
    pg_server_url: str, tmp_path_factory: pytest.TempPathFactory, upstream: ThreadedServer
) -> Iterator[Server]:
    """A control plane whose operator allowlisted ``upstream`` (``CRANK_UPSTREAM_ALLOWLIST``),
    so a workspace granted it can try operations against it from the console."""
    with serve_control_plane(
        pg_server_url,
        tmp_path_factory.mktemp("egress-server"),
        f"crank_console_{os.getpid()}",
        CRANK_UPSTREAM_ALLOWLIST=f"127.0.0.1:{upstream.port}",
    ) as served:
        yield served
