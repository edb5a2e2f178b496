"""A real gateway process over the fuzz catalog (tests.gateway.fuzz.catalog) for each
fuzz test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gateway.fuzz.catalog import gateway_env, seed, serve_echo
from tests.gateway.fuzz.fuzzed import Fuzzed
from tests.gateway.fuzz.oracles import worker_rss_mib
from tests.gateway.fuzz.runs import Target
from tests.support.api import Client
from tests.support.gateway import run_gateway


@pytest.fixture
async def fuzzed(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> AsyncIterator[Fuzzed]:
    with serve_echo() as echo:
        keys = await seed(client, admin_token, echo.port)
        async with run_gateway(database_url, tmp_path, extra_env=gateway_env(echo.port)) as gateway:
            start_rss, _ = worker_rss_mib(gateway.process.pid)
            yield Fuzzed(Target(gateway.port, keys, echo), gateway, start_rss)
