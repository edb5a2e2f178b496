"""One tools/call through FastMCP's OpenAPI proxy of the rates upstream, checked, per protocol era.

    .venv/bin/python bench/fastmcp_smoke.py

Runs with the project's venv. It creates or reuses the FastMCP venv
(bench/fastmcp_venv.py), starts bench/rates_upstream.py under granian and
bench/fastmcp_server.py on loopback, then for each era sends the exact
request a wrk Lua script must send, checks the answer carries the upstream's
rate and that the upstream served exactly one request per call, and prints
the request as a curl line. Stateless FastMCP needs no initialize (and issues
no session id): the smoke sends none before the calls, and checks that an
initialize, if one is sent, answers without ``Mcp-Session-Id``.

The side-by-side benchmark imports ``start_fastmcp``, ``wait_fastmcp`` and
``tools_call_request`` from here.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fastmcp_venv import ensure_fastmcp_venv  # noqa: E402 - after the path set-up
from bench.gateway_tools_call import (  # noqa: E402
    LEGACY_VERSION,
    MODERN_VERSION,
    free_port,
    initialize_message,
    serve,
    stop,
    tail,
    upstream_count,
    wait_up,
)
from bench.rates_upstream import DATE, RATE  # noqa: E402

SERVER = ROOT / "bench" / "fastmcp_server.py"
PATH = "/mcp"
TOOL = "latest_rate"
ARGUMENTS = {"base": "USD", "symbols": "EUR"}  # FastMCP names them after the query parameters
EXPECTED = {"amount": 1.0, "base": "USD", "date": DATE, "rates": {"EUR": RATE}}
ERAS = ("legacy", "modern")


def tools_call_request(era: str) -> tuple[dict[str, str], str]:
    """Headers and body of one stateless tools/call to FastMCP in ``era``."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    params: dict[str, Any] = {"name": TOOL, "arguments": ARGUMENTS}
    if era == "legacy":
        headers["MCP-Protocol-Version"] = LEGACY_VERSION
    else:
        headers |= {
            "MCP-Protocol-Version": MODERN_VERSION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": TOOL,
        }
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return headers, msgspec.json.encode(message).decode()


def start_fastmcp(
    python: Path, port: int, upstream: str, log: Path, cpu: int | None = None
) -> subprocess.Popen[bytes]:
    """bench/fastmcp_server.py under ``python``; stdout and stderr go to ``log``."""
    argv = [str(python), str(SERVER), "--port", str(port), "--upstream", upstream]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    with log.open("wb") as out:
        # Own session, as bench/gateway_tools_call.py's serve: stop() signals the group.
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=out, start_new_session=True)


async def wait_fastmcp(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``url`` answers a POST (stateless FastMCP answers GET with 405)."""
    headers, _ = tools_call_request("legacy")
    ping = b'{"jsonrpc":"2.0","id":0,"method":"ping"}'
    deadline = time.monotonic() + 60  # FastMCP imports for several seconds on a busy machine
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"FastMCP exited:\n{tail(log)}")
            try:
                async with http.post(url, data=ping, headers=headers) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"FastMCP did not come up at {url}:\n{tail(log)}")


def curl_line(url: str, headers: dict[str, str], body: str) -> str:
    parts = ["curl", "-s", url, *[f"-H {shlex.quote(f'{k}: {v}')}" for k, v in headers.items()]]
    return " ".join([*parts, "-d", shlex.quote(body)])


async def check_call(http: aiohttp.ClientSession, url: str, era: str, upstream_port: int) -> None:
    headers, body = tools_call_request(era)
    before = await upstream_count(upstream_port)
    async with http.post(url, data=body.encode(), headers=headers) as response:
        raw = await response.read()
        content_type = response.headers.get("content-type", "")
    result = msgspec.json.decode(raw).get("result")
    served = await upstream_count(upstream_port) - before
    if (
        response.status != 200
        or not content_type.startswith("application/json")
        or not isinstance(result, dict)
        or result.get("isError") is not False
        or result.get("structuredContent") != EXPECTED
        or served != 1
    ):
        raise RuntimeError(f"{era}: HTTP {response.status}, upstream {served}x: {raw[:600]!r}")
    print(f"{era} tools/call: HTTP 200 {content_type}, upstream served {served}, result:")
    print(f"  {raw.decode()}")
    print("  wrk must send: POST", url)
    for name, value in headers.items():
        print(f"    {name}: {value}")
    print(f"    body: {body}")
    print(f"  curl: {curl_line(url, headers, body)}")


async def check_initialize(http: aiohttp.ClientSession, url: str) -> None:
    headers, _ = tools_call_request("legacy")
    async with http.post(url, data=initialize_message(), headers=headers) as response:
        answer = msgspec.json.decode(await response.read())
        session = response.headers.get("mcp-session-id")
    if response.status != 200 or session is not None:
        raise RuntimeError(f"initialize: HTTP {response.status}, session {session!r}: {answer}")
    server = answer["result"]["serverInfo"]
    print(f"initialize (optional): HTTP 200, no Mcp-Session-Id, server {server}")


def installed_versions(python: Path) -> str:
    """The versions that matter to the comparison, as pip sees them in the FastMCP venv."""
    argv = [str(python), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"]
    versions = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
    wanted = ("fastmcp==", "mcp==", "uvicorn==", "httpx2==", "starlette==", "pydantic==")
    return " ".join(v for v in versions if v.startswith(wanted))


async def main() -> int:
    python = await asyncio.to_thread(ensure_fastmcp_venv)
    workdir = Path(tempfile.mkdtemp(prefix="crank-fastmcp-smoke-"))
    upstream_log, server_log = workdir / "upstream.log", workdir / "fastmcp.log"
    upstream_port, port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    env |= {"PYTHONPATH": str(ROOT)}
    upstream = serve(
        0, "bench.rates_upstream:app", upstream_port, env, factory=False, log=upstream_log
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        await wait_up(f"http://127.0.0.1:{upstream_port}/_count", upstream, upstream_log)
        server = start_fastmcp(python, port, f"http://127.0.0.1:{upstream_port}", server_log)
        url = f"http://127.0.0.1:{port}{PATH}"
        await wait_fastmcp(url, server, server_log)
        quiet_from = server_log.stat().st_size
        async with aiohttp.ClientSession() as http:
            for era in ERAS:  # no initialize first: stateless needs none
                await check_call(http, url, era, upstream_port)
            await check_initialize(http, url)
        printed = server_log.read_text(errors="replace")[quiet_from:]
        if printed:
            raise RuntimeError(f"FastMCP printed during the calls:\n{printed}")
        print("FastMCP printed nothing during the calls")
        print("FastMCP venv:", python, await asyncio.to_thread(installed_versions, python))
        return 0
    finally:
        if server is not None:
            stop(server)
        stop(upstream)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
