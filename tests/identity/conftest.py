"""The identity tests' fixtures: ``shop`` (tests/support/oauth_shop.py) with its defaults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.api import Client
from tests.support.oauth_shop import Shop, open_shop


@pytest.fixture
async def shop(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> AsyncIterator[Shop]:
    async with open_shop(client, admin_token, database_url, tmp_path) as opened:
        yield opened
