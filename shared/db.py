"""Postgres access: one async pool per process, JSON through msgspec."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

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

# Far past a healthy short step (a pool wait, a statement); soon enough to notice a stopped server.
DB_TIMEOUT_S = 5.0


def without_nul(value: Any) -> Any:
    """``value`` with every NUL in its strings and keys replaced by U+FFFD, so jsonb can
    store it: an upstream's answer recorded as a result (of an approval, of an
    idempotent call) is kept, marked where it changed, rather than lost to a refused
    write and the call sent again."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value


async def connect(conninfo: str, *, autocommit: bool = False) -> Connection:
    """One connection outside the pool (migrations, LISTEN, the CLI); rows come as dicts."""
    return await psycopg.AsyncConnection.connect(
        conninfo, autocommit=autocommit, row_factory=dict_row
    )


async def open_pool(
    conninfo: str,
    *,
    max_size: int = 10,
    name: str = "crank",
    autocommit: bool = False,
    check: bool = False,
    reconnect_timeout_s: float = 300.0,
) -> AsyncConnectionPool[Connection]:
    """``check`` tests a connection before handing it out (one round trip), so
    connections a database restart broke are replaced instead of failing a
    request; ``reconnect_timeout_s`` bounds each reconnection attempt's backoff,
    after which the next request starts a fresh attempt at once."""
    pool: AsyncConnectionPool[Connection] = AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"row_factory": dict_row, "autocommit": autocommit},
        connection_class=psycopg.AsyncConnection,
        name=name,
        open=False,
        check=AsyncConnectionPool.check_connection if check else None,
        reconnect_timeout=reconnect_timeout_s,
    )
    await pool.open(wait=True, timeout=30)
    return pool


T = TypeVar("T")
_abandoned: set[asyncio.Future[Any]] = set()


def _forget(task: asyncio.Future[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned failure is expected, not news


async def within(timeout_s: float, work: Awaitable[T]) -> T:
    """``await work``, raising TimeoutError after ``timeout_s`` even if ``work`` will not stop.

    A cancelled query makes psycopg ask the server to cancel it, which against
    a server that stopped answering takes up to ten seconds more; a caller that
    must answer quickly cannot wait for that. Past the deadline the work is
    cancelled and left to finish in the background.
    """
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    finally:
        if not task.done():
            task.cancel()
            _abandoned.add(task)
            task.add_done_callback(_forget)
    if not done:
        raise TimeoutError
    return task.result()
