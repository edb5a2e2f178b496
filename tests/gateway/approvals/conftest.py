"""The upstream shop every approvals test module calls, an HTTP client for the
module's own ``gateway`` fixture, and the shopfront with two gateway replicas of
the outcome tests (tests.support.approval_outcomes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.api import Client
from tests.support.approval_outcomes import (
    Replica,
    Shopfront,
    gateway_env,
    replica,
    set_up_shopfront,
)
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


@pytest.fixture
async def shopfront(client: Client, admin_token: str, shop: Shop) -> Shopfront:
    return await set_up_shopfront(client, admin_token, shop)


@pytest.fixture
async def replicas(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> AsyncIterator[tuple[Replica, Replica]]:
    """Replicas A and B of one gateway on one database."""
    env = gateway_env(shop)
    async with replica(database_url, tmp_path, env) as a, replica(database_url, tmp_path, env) as b:
        yield a, b
