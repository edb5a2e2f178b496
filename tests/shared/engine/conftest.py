"""Fixtures of the engine tests: an executor allowed to reach loopback upstreams."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy


@pytest.fixture
async def executor() -> AsyncIterator[UpstreamExecutor]:
    """The outbound executor with private (loopback) upstreams allowed."""
    policy = AddressPolicy.from_settings(allow_private_upstreams=True, upstream_allowlist=())
    async with UpstreamExecutor(policy) as running:
        yield running
