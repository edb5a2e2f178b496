"""deploy/compose.yaml and deploy/nginx.conf: the structure checked here, and, where a
container runtime is present, the whole stack started and the seed's curl lines sent
through nginx to the two gateway replicas.

No JSON schema of the current compose specification ships in a package this project can
install (the last docker-compose wheel on PyPI, 1.29.2, carries a 2021 schema without the
top-level ``name``), so the file is validated by ``docker compose config`` itself where the
runtime is present, and by the assertions below everywhere. nginx's configuration also runs
for real, in front of a real gateway and control plane, in test_nginx_proxy.py.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.support.mcp import curl_client
from tests.support.paths import REPOSITORY_DIR
from tests.support.processes import free_port
from tests.support.seed import seed_demo_rates, seed_tool_names

DEPLOY_DIR = REPOSITORY_DIR / "deploy"
COMPOSE_FILE = DEPLOY_DIR / "compose.yaml"
NGINX_CONF = DEPLOY_DIR / "nginx.conf"
CRANK_SERVICES = ("migrate", "control-plane", "gateway")


@functools.cache
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"][name]
    return found


def nginx_locations() -> dict[str, str]:
    """Each ``location`` block's path → its body (the file has no nested blocks in them)."""
    text = NGINX_CONF.read_text()
    return dict(re.findall(r"location\s+(?:=\s*)?(\S+)\s*\{([^}]*)\}", text))


def directive(body: str, name: str) -> str:
    (value,) = re.findall(rf"^\s*{name}\s+([^;]+);", body, re.MULTILINE)
    return str(value)


def nginx_variables() -> dict[str, str]:
    return dict(re.findall(r"^\s*set\s+\$(\w+)\s+([^;]+);", NGINX_CONF.read_text(), re.MULTILINE))


def test_services_start_in_order() -> None:
    assert set(compose()["services"]) == {"postgres", *CRANK_SERVICES, "proxy"}
    assert service("migrate")["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("control-plane", "gateway"):
        assert service(name)["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"}
        }
    assert service("proxy")["depends_on"] == {
        "control-plane": {"condition": "service_healthy"},
        "gateway": {"condition": "service_healthy"},
    }
    for name in ("control-plane", "gateway"):
        probe = " ".join(service(name)["healthcheck"]["test"])
        assert "/readyz" in probe


def test_two_gateway_replicas_behind_the_proxy_only() -> None:
    gateway = service("gateway")
    assert gateway["deploy"]["replicas"] == 2
    assert "container_name" not in gateway  # a fixed name allows one container
    published = {name: s.get("ports", []) for name, s in compose()["services"].items()}
    assert {name for name, ports in published.items() if ports} == {"proxy"}
    for port in published["proxy"]:
        assert port.startswith("127.0.0.1:")  # a trial on one machine: loopback only


def test_crank_containers_are_hardened_and_agree_on_the_prefix() -> None:
    for name in CRANK_SERVICES:
        crank = service(name)
        assert crank["read_only"] is True
        assert crank["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in crank["security_opt"]
        assert crank["tmpfs"] == ["/tmp"]  # noqa: S108 (the container's /tmp, in memory)
        environment = crank["environment"]
        assert environment["CRANK_PUBLIC_PATH_PREFIX"] == "/mcp"
        assert environment["CRANK_SECRET_KEY"].startswith("${CRANK_SECRET_KEY:?")
    assert service("gateway")["environment"]["CRANK_GATEWAY_WORKERS"] == "1"


def test_the_services_honour_what_nginx_forwards() -> None:
    """nginx sends X-Forwarded-For and -Proto; the services trust the private networks
    (only containers reach them), so the console cookie's Secure flag follows the scheme."""
    conf = NGINX_CONF.read_text()
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in conf
    for name in ("control-plane", "gateway"):
        assert "ports" not in service(name)  # reached through nginx only
        environment = service(name)["environment"]
        assert environment["CRANK_TRUSTED_PROXIES"] == "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
        assert environment["CRANK_CONSOLE_COOKIE_SECURE"] == "${CRANK_CONSOLE_COOKIE_SECURE:-auto}"


def test_nginx_publishes_each_path_to_its_service_unchanged_and_streams_mcp() -> None:
    (volume,) = service("proxy")["volumes"]
    mounted, target, mode = volume.split(":")
    assert (COMPOSE_FILE.parent / mounted).resolve() == NGINX_CONF.resolve()
    assert (target, mode) == ("/etc/nginx/conf.d/default.conf", "ro")
    variables = nginx_variables()
    backends = {"crank_gateway": "gateway:8080", "crank_control_plane": "control-plane:8000"}
    assert variables == backends
    locations = nginx_locations()
    # No URI after the host in proxy_pass: nginx forwards the path as it came (/mcp/v1/...).
    assert directive(locations["/mcp/"], "proxy_pass") == "http://$crank_gateway"
    assert directive(locations["/api/"], "proxy_pass") == "http://$crank_control_plane"
    assert directive(locations["/ui"], "proxy_pass") == "http://$crank_control_plane"
    mcp = locations["/mcp/"]
    assert directive(mcp, "proxy_buffering") == "off"
    # Longer than the gateway's 15-second keep-alive on idle streams.
    assert int(directive(mcp, "proxy_read_timeout").removesuffix("s")) > 15
    # The port nginx listens on is the one compose publishes.
    listen = directive(NGINX_CONF.read_text(), "listen")
    (published,) = service("proxy")["ports"]
    assert published.endswith(f":{listen}")
    healthcheck = " ".join(service("proxy")["healthcheck"]["test"])
    assert "/proxy-health" in healthcheck
    assert "/proxy-health" in locations


def _runtime_missing() -> str | None:
    """Why the stack cannot be started here, or None."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    version = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, timeout=60, check=False
    )
    if version.returncode != 0:
        said = (version.stderr or version.stdout).strip().splitlines()
        return f"docker has no compose plugin ({said[0] if said else 'no output'})"
    info = subprocess.run(
        ["docker", "info"], capture_output=True, text=True, timeout=60, check=False
    )
    if info.returncode != 0:
        said = info.stderr.strip().splitlines()
        return f"no container engine answers ({said[-1] if said else 'docker info failed'})"
    return None


def _compose(project: str, env: dict[str, str], *args: str, timeout: float) -> str:
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "-p", project, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"docker compose {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, str, dict[str, str]]]:
    """The compose stack under a project of its own: (base URL, project, environment)."""
    reason = _runtime_missing()
    if reason is not None:
        pytest.skip(reason)
    port = free_port()
    project = f"crank-test-{secrets.token_hex(4)}"
    env = os.environ | {
        "CRANK_SECRET_KEY": secrets.token_urlsafe(32),
        "CRANK_HTTP_PORT": str(port),
    }
    try:
        _compose(project, env, "up", "-d", "--build", "--wait", timeout=1800)
        yield f"http://127.0.0.1:{port}", project, env
    finally:
        _compose(project, env, "down", "-v", "--remove-orphans", timeout=300)


def test_docker_compose_accepts_the_file(stack: tuple[str, str, dict[str, str]]) -> None:
    _, project, env = stack
    rendered = yaml.safe_load(_compose(project, env, "config", timeout=120))
    assert rendered["services"]["gateway"]["deploy"]["replicas"] == 2


async def test_the_seed_curl_lines_through_nginx(stack: tuple[str, str, dict[str, str]]) -> None:
    """initialize and tools/list of the seed, byte for byte, through /mcp. Its tools/call is
    left out: it would dial api.frankfurter.dev, and tests reach only this machine."""
    base, project, env = stack
    token = _compose(
        project,
        env,
        "run",
        "--rm",
        "--no-deps",
        "-T",
        "control-plane",
        "tokens",
        "create",
        "--role",
        "admin",
        "--name",
        "test",
        timeout=300,
    ).strip()
    async with httpx.AsyncClient(base_url=base, timeout=30) as admin_client:
        key = await seed_demo_rates(admin_client, token, free_port())
    async with curl_client(base) as http:
        # Several sessions: nginx spreads them over both replicas, and each answers any.
        for _ in range(4):
            assert await seed_tool_names(http, key) == ["frankfurter_latest_rate"]
    # The console and the admin API answer under their paths too.
    async with httpx.AsyncClient(base_url=base, timeout=30) as http_plain:
        assert (await http_plain.get("/ui/sign-in")).status_code == 200
        assert (await http_plain.get("/api/v1/schema/openapi.json")).status_code == 200
