"""Postgres access: one async pool per process, JSON through msgspec."""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import set_json_dumps, set_json_loads
from psycopg_pool import AsyncConnectionPool

_json_encoder = msgspec.json.Encoder()


def _dumps(value: Any) -> str:
    return _json_encoder.encode(value).decode()


set_json_dumps(_dumps)
set_json_loads(msgspec.json.decode)

Connection = psycopg.AsyncConnection[dict[str, Any]]


async def connect(conninfo: str, *, autocommit: bool = False) -> Connection:
    return await psycopg.AsyncConnection.connect(
        conninfo, autocommit=autocommit, row_factory=dict_row
    )


async def open_pool(
    conninfo: str, *, max_size: int = 10, name: str = "crank", autocommit: bool = False
) -> AsyncConnectionPool[Connection]:
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": autocommit},
        connection_class=psycopg.AsyncConnection,
        name=name,
        open=False,
    )
    await pool.open(wait=True, timeout=30)
    return pool
