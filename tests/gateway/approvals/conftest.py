"""The upstream shop every approvals test module calls."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.approvals import Shop, serve_shop


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    async with serve_shop() as state:
        yield state
