"""The upstream shop every approvals test module calls, and an HTTP client for the
module's own ``gateway`` fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.approvals import Shop, serve_shop
from tests.support.gateway import Gateway


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    async with serve_shop() as state:
        yield state


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the module's ``gateway``."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as client:
        yield client
