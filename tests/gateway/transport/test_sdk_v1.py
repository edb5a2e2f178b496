"""The official MCP Python SDK 1.x client against a real gateway.

Most deployed Python MCP clients are still on the 1.x line, which speaks only
the legacy era (sessions). 1.x and 2.x cannot share a virtual environment,
so this test builds one for the pinned 1.x release under the user's cache
directory (``$XDG_CACHE_HOME/crank-tests``, default ``~/.cache/crank-tests``),
reuses it on later runs, and runs tests/support/clients/mcp_v1_client.py with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.api import Client
from tests.support.gateway import SEED_URL_PATH, run_gateway, seed_catalog
from tests.support.mcp import TOOLS_LIST, bearer
from tests.support.paths import TESTS_DIR

MCP_V1 = "1.30.0"
# What that release sends as its latest protocol version in initialize.
MCP_V1_PROTOCOL = "2025-11-25"
CLIENT = TESTS_DIR / "support" / "clients" / "mcp_v1_client.py"


def _index_reachable(python: Path) -> bool:
    """Whether pip's package index answers a TCP connection (a local index always does)."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        configured = subprocess.run(
            [str(python), "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        url = configured.stdout.strip() if configured.returncode == 0 else ""
    parts = urlsplit(url or "https://pypi.org/simple")
    if parts.hostname is None:
        return True
    port = parts.port or (80 if parts.scheme == "http" else 443)
    try:
        with socket.create_connection((parts.hostname, port), timeout=10):
            return True
    except OSError:
        return False


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "crank-tests"


@pytest.fixture(scope="session")
def mcp_v1_python() -> Path:
    """The Python of a virtual environment with exactly mcp==MCP_V1 installed."""
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    venv = _cache_dir() / f"venv-mcp-{MCP_V1}-{version}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return python
    # Built beside the final place and renamed when complete: an interrupted
    # build is never reused, and concurrent runs do not see each other's half.
    building = venv.with_name(f"{venv.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(building)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        installed = subprocess.run(
            [
                str(building / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                f"mcp=={MCP_V1}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if installed.returncode != 0:
            if not _index_reachable(building / "bin" / "python"):
                pytest.skip(f"cannot install mcp=={MCP_V1}: no network to reach the package index")
            output = installed.stdout + installed.stderr
            pytest.fail(f"pip install mcp=={MCP_V1} failed:\n{output[-4000:]}")
        (building / ".complete").write_text(f"mcp=={MCP_V1}\n")
        try:
            building.rename(venv)
        except OSError:  # another run finished first: use its environment
            assert (venv / ".complete").exists()
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return python


@pytest.mark.timeout(900)  # the first run installs the SDK
async def test_mcp_sdk_1x_client_initializes_lists_tools_and_ends_its_session_on_exit(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, mcp_v1_python: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["CRANK_AGENT_KEY"] = catalog.agent_key
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        process = await asyncio.create_subprocess_exec(
            str(mcp_v1_python),
            str(CLIENT),
            gateway.url + SEED_URL_PATH,
            env=env,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, stderr.decode(errors="replace")
        result = json.loads(stdout.decode().strip().splitlines()[-1])
        assert result["tools"] == ["frankfurter_latest_rate"]
        assert result["protocol_version"] == MCP_V1_PROTOCOL
        assert result["server_name"] == "crank"
        session_id = result["session_id"]
        assert session_id.startswith("crs1.")

        # Leaving the client sent DELETE (the metric below counts it): the id now gets 404.
        in_session = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        gone = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=in_session)
        assert gone.status_code == 404
        async with httpx.AsyncClient() as plain:
            metrics = (await plain.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")).text
        assert 'crank_mcp_requests_total{method="DELETE",status="204"} 1.0' in metrics
