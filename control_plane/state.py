"""What one control-plane process holds for its lifetime."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from shared.address_limit import AddressLimit
from shared.crypto import KeyHasher, SecretBox
from shared.db import Connection
from shared.engine.outbound import UpstreamExecutor
from shared.last_use import LastUseRecorder
from shared.settings import Settings


@dataclass(slots=True)
class AppState:
    """Built once at startup; handlers get it through the ``CrankState`` dependency."""

    settings: Settings
    pool: AsyncConnectionPool[Connection]
    hasher: KeyHasher
    box: SecretBox
    token_use: LastUseRecorder
    executor: UpstreamExecutor  # try-it's upstream calls, behind the SSRF guard
    token_failures: AddressLimit  # failed admin tokens per client (control_plane.auth)
