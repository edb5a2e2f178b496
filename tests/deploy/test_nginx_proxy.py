"""deploy/nginx.conf, the compose stack's proxy, run by a real nginx in front of a real
control plane and gateway on loopback: the seed's curl lines through /mcp, the admin API
through /api (which seeds the catalog), the console through /ui, and an SSE stream's first
event through nginx while the stream stays open.

The compose file names its services (``gateway:8080``, ``control-plane:8000``); here they
are loopback ports, the one edit made to the file. nginx is Debian's, unpacked by
tests/deploy/install.sh; the test skips where it could not be had.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import make_token
from tests.support.deploy import require_nginx
from tests.support.gateway import SEED_URL_PATH, run_control_plane, run_gateway
from tests.support.mcp import curl_client, modern, request
from tests.support.paths import REPOSITORY_DIR
from tests.support.processes import accepts_connections, free_port
from tests.support.seed import seed_demo_rates, seed_tool_names

NGINX_CONF = REPOSITORY_DIR / "deploy" / "nginx.conf"
# The proxy's settings as compose runs them (deploy/compose.yaml).
PREFIX = {"CRANK_PUBLIC_PATH_PREFIX": "/mcp"}


def loopback_conf(port: int, gateway_port: int, control_plane_port: int) -> str:
    """deploy/nginx.conf with its listen port and service names moved to loopback."""
    text = NGINX_CONF.read_text()
    edits = {
        "listen 8080;": f"listen 127.0.0.1:{port};",
        "gateway:8080;": f"127.0.0.1:{gateway_port};",
        "control-plane:8000;": f"127.0.0.1:{control_plane_port};",
    }
    for old, new in edits.items():
        assert text.count(old) == 1, f"deploy/nginx.conf no longer has {old!r} once"
        text = text.replace(old, new)
    return text


@contextmanager
def run_nginx(tmp_path: Path, site: str, port: int) -> Iterator[str]:
    """nginx with ``site`` in its http block, as the official image includes conf.d."""
    root = tmp_path / "nginx"
    root.mkdir()
    (root / "site.conf").write_text(site)
    temp_paths = "\n".join(
        f"    {kind}_temp_path {root}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (root / "nginx.conf").write_text(
        f"daemon off;\nmaster_process off;\npid {root}/nginx.pid;\nerror_log stderr notice;\n"
        f"events {{ worker_connections 64; }}\n"
        f"http {{\n    access_log off;\n{temp_paths}\n    include {root}/site.conf;\n}}\n"
    )
    log_path = root / "nginx.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(require_nginx()), "-p", str(root), "-e", "stderr", "-c", str(root / "nginx.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 20
        while not accepts_connections(port):
            assert process.poll() is None, f"nginx exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"nginx not listening: {log_path.read_text()}"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def _first_event(lines: AsyncIterator[str]) -> dict[str, Any]:
    async for line in lines:
        if line.startswith("data: "):
            return dict(json.loads(line[6:]))
    raise AssertionError("the stream ended before its first event")


async def test_the_seed_through_nginx(database_url: str, tmp_path: Path) -> None:
    require_nginx()
    admin = await make_token(database_url, "admin")
    port = free_port()
    async with (
        run_control_plane(database_url, tmp_path, extra_env=PREFIX) as control_plane,
        run_gateway(database_url, tmp_path, refresh_ms=200, extra_env=PREFIX) as gateway,
    ):
        site = loopback_conf(port, gateway.port, control_plane.port)
        with run_nginx(tmp_path, site, port) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as api:
                # /api: the catalog is made through nginx.
                key = await seed_demo_rates(api, admin, free_port())
                # /ui: the console's sign-in page.
                assert (await api.get("/ui/sign-in")).status_code == 200

            async with curl_client(base) as http:
                # The key reaches the gateway's snapshot within a few refreshes.
                deadline = time.monotonic() + 30
                while (found := await seed_tool_names(http, key)) != ["frankfurter_latest_rate"]:
                    assert time.monotonic() < deadline, f"tools/list through nginx: {found}"
                    await asyncio.sleep(0.2)

            # An SSE stream: its first event arrives through nginx while it stays open
            # (a buffering proxy would hold it back).
            listen = request("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
            async with (
                httpx.AsyncClient(base_url=base, timeout=30) as http,
                http.stream(
                    "POST", SEED_URL_PATH, json=listen, headers=modern(key, "subscriptions/listen")
                ) as stream,
            ):
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                event = await asyncio.wait_for(_first_event(stream.aiter_lines()), timeout=10)
                assert event["method"] == "notifications/subscriptions/acknowledged"
