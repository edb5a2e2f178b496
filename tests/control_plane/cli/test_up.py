"""``crank up`` as a user runs it: a real process, the embedded PostgreSQL 18 on an
empty data directory, real child processes, and signals that must leave nothing
running. Plus the pieces it relies on: the 0600 dev state file and the re-use
of saved credentials.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from control_plane.cli import devstate
from control_plane.cli.banner import TEXTS
from control_plane.cli.devkeys import ensure_admin_token, ensure_api_key
from control_plane.cli.seed import ensure_workspace, seed_demo
from control_plane.services.keys import revoke_api_key
from shared.crypto import KeyHasher
from shared.db import connect
from shared.engine.errors import Language
from shared.keys import KeyKind, generate_key, parse_key
from tests.support.client_snippets import printed_curl_lines
from tests.support.crank_up import CrankUp, postmaster
from tests.support.db import TEST_SECRET_KEY
from tests.support.processes import accepts_connections, descendants, free_port, running


def get_text(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - loopback test URL
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return response.status, response.read().decode()


def get_json(url: str, token: str | None = None) -> tuple[int, Any]:
    status, text = get_text(url, token)
    return status, json.loads(text)


def catalog_version(socket_dir: str) -> int:
    with psycopg.connect(f"postgresql://postgres@/postgres?host={socket_dir}") as conn:
        row = conn.execute("SELECT version FROM catalog_state").fetchone()
    assert row is not None
    return int(row[0])


def check_stopped(crank_up: CrankUp, children: set[int], postmaster_pid: int) -> None:
    assert children, "crank up started no child processes"
    left = [pid for pid in (*children, postmaster_pid) if running(pid)]
    assert left == [], f"still running after crank up exited: {left}"
    for name, port in crank_up.ports.items():
        assert not accepts_connections(port), f"{name} port {port} still accepts connections"


def check_printed_approval_curl_lines(banner: str, language: Language = "en") -> None:
    """The seed's four approval lines; the list one runs as printed (no approvals yet)."""
    block = banner[banner.index(TEXTS[language]["approvals"]) :].split("\n\n")[0]
    commands = printed_curl_lines(block)
    assert [c.split()[1].rsplit("/", 1)[-1] for c in commands] == [
        "approvals",
        "<approval_id>",
        "approve",
        "deny",
    ], block
    listed = subprocess.run(["bash", "-c", commands[0]], capture_output=True, text=True, timeout=30)
    assert json.loads(listed.stdout) == {"items": [], "next_cursor": None}, listed.stdout


@pytest.mark.timeout(240)
def check_printed_mcp_curl_lines(banner: str, language: Language = "en") -> None:
    """Run the banner's MCP curl lines as printed: initialize, then tools/list with its session."""
    texts = TEXTS[language]
    mcp_block = banner[banner.index(f"\n{texts['mcp']}\n") : banner.index(texts["approvals"])]
    commands = printed_curl_lines(mcp_block)
    assert len(commands) == 2, mcp_block
    initialize = subprocess.run(
        ["bash", "-c", commands[0]], capture_output=True, text=True, timeout=30
    )
    assert initialize.returncode == 0, initialize.stderr
    assert "HTTP/1.1 200" in initialize.stdout, initialize.stdout
    session = re.search(r"^mcp-session-id: (\S+)", initialize.stdout, re.M | re.I)
    assert session is not None, initialize.stdout
    listing = commands[1].replace("<MCP-Session-Id from the initialize answer>", session[1])
    listed = subprocess.run(["bash", "-c", listing], capture_output=True, text=True, timeout=30)
    assert json.loads(listed.stdout)["result"]["tools"][0]["name"] == "frankfurter_latest_rate"


def check_printed_inbox_link(banner: str) -> None:
    """The approver inbox line opens the page (docs/mcp-interface.md, "The approver inbox")."""
    found = re.search(r"approver inbox\s+(http\S+/approvals/inbox)$", banner, re.M)
    assert found is not None, banner
    status, page = get_text(found[1])
    assert status == 200
    assert '<script src="inbox/inbox.js" defer></script>' in page


def test_crank_up_serves_the_demo_and_stops_everything_on_sigint(start_crank_up: Any) -> None:
    crank_up: CrankUp = start_crank_up()
    banner = crank_up.wait_ready()
    cp = f"http://127.0.0.1:{crank_up.ports['control_plane']}"

    token_match = re.search(r"admin token\s+(crk_admin_\S+)", banner)
    assert token_match is not None, banner
    token = token_match[1]
    status, workspaces = get_json(f"{cp}/api/v1/workspaces", token)
    assert status == 200
    assert [w["slug"] for w in workspaces["items"]] == ["default"]
    for slug in ("currency-rates", "sales"):
        status, agent = get_json(f"{cp}/api/v1/workspaces/default/agents/{slug}", token)
        assert status == 200
        assert agent["published"] is not None
        assert agent["published_version"] >= 1
    status, order = get_json(f"http://127.0.0.1:{crank_up.ports['sales']}/orders/ord_123")
    assert (status, order["status"]) == (200, "draft")
    assert "/mcp/v1/default/currency-rates" in banner
    check_printed_inbox_link(banner)
    assert f"curl {cp}/api/v1/workspaces -H 'Authorization: Bearer {token}'" in banner

    check_printed_mcp_curl_lines(banner)
    check_printed_approval_curl_lines(banner)

    state_file = crank_up.data_dir / devstate.STATE_FILE
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    state = devstate.load_dev_state(state_file)
    assert state is not None
    assert state.admin_token == token
    assert state.control_plane_url == cp
    assert set(state.agent_keys) == {"currency-rates", "sales"}
    assert set(state.approval_keys) == {"sales"}
    assert all(key in banner for key in [*state.agent_keys.values(), state.approval_keys["sales"]])

    children = descendants(crank_up.process.pid)
    found = postmaster(crank_up.data_dir / "pgdata")
    assert found is not None
    assert running(found[0])

    assert crank_up.stop(signal.SIGINT) == 0
    check_stopped(crank_up, children, found[0])


def send_json(method: str, url: str, token: str, etag: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "If-Match": etag}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return response.headers["ETag"], json.loads(response.read() or b"null")


def add_operation_as_the_quickstart_does(cp: str, token: str) -> None:
    """Step 4 of docs/quickstart.md, through the API: currency-rates gets a second
    operation and is published as v2."""
    agent_url = f"{cp}/api/v1/workspaces/default/agents/currency-rates"
    request = urllib.request.Request(agent_url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        etag, agent = response.headers["ETag"], json.loads(response.read())
    draft = {**agent["draft"], "operations": ["frankfurter_latest_rate", "sales_get_order"]}
    etag, _ = send_json("PUT", agent_url, token, etag, draft)
    _, published = send_json("POST", f"{agent_url}/publish", token, etag)
    assert published["published_version"] == 2, published


def audit_actors(socket_dir: str) -> list[str]:
    with psycopg.connect(f"postgresql://postgres@/postgres?host={socket_dir}") as conn:
        return [row[0] for row in conn.execute("SELECT actor FROM audit_log ORDER BY id")]


@pytest.mark.timeout(300)
def test_crank_up_again_reuses_its_credentials_and_changes_nothing(start_crank_up: Any) -> None:
    """Nor does it undo what the user changed in between (issue #27: the quickstart's
    step 4 was republished away by the next `./dev up`)."""
    first: CrankUp = start_crank_up()
    first_banner = first.wait_ready()
    token_match = re.search(r"admin token\s+(crk_admin_\S+)", first_banner)
    assert token_match is not None, first_banner
    cp = f"http://127.0.0.1:{first.ports['control_plane']}"
    add_operation_as_the_quickstart_does(cp, token_match[1])
    found = postmaster(first.data_dir / "pgdata")
    assert found is not None
    version_before = catalog_version(found[1])
    audit_before = audit_actors(found[1])
    assert first.stop(signal.SIGTERM) == 0

    second: CrankUp = start_crank_up()
    second_banner = second.wait_ready()
    found = postmaster(second.data_dir / "pgdata")
    assert found is not None
    children = descendants(second.process.pid)

    assert re.findall(r"crk_\w+", second_banner) == re.findall(r"crk_\w+", first_banner)
    assert catalog_version(found[1]) == version_before
    assert audit_actors(found[1]) == audit_before
    status, agent = get_json(
        f"{cp}/api/v1/workspaces/default/agents/currency-rates", token_match[1]
    )
    assert (status, agent["published_version"]) == (200, 2)
    assert agent["published"]["operations"] == ["frankfurter_latest_rate", "sales_get_order"]
    assert "demo_seed_skipped" in second.stderr_path.read_text()
    assert second.stop(signal.SIGTERM) == 0
    check_stopped(second, children, found[0])


@pytest.mark.timeout(180)
def test_crank_up_uses_crank_database_url_when_set(start_crank_up: Any, database_url: str) -> None:
    crank_up: CrankUp = start_crank_up({"CRANK_DATABASE_URL": database_url})
    banner = crank_up.wait_ready()
    children = descendants(crank_up.process.pid)

    assert "the server in CRANK_DATABASE_URL" in banner
    assert not (crank_up.data_dir / "pgdata").exists()
    with psycopg.connect(database_url) as conn:
        agents = conn.execute("SELECT slug FROM agents WHERE published IS NOT NULL").fetchall()
    assert sorted(row[0] for row in agents) == ["currency-rates", "sales"]
    assert crank_up.stop(signal.SIGINT) == 0
    assert [pid for pid in children if running(pid)] == []


@pytest.mark.timeout(180)
def test_crank_up_prints_in_crank_language(start_crank_up: Any, database_url: str) -> None:
    """With CRANK_LANGUAGE=ru the banner is Russian, the notes of its approve and deny
    lines too, and its curl lines still run as printed."""
    crank_up: CrankUp = start_crank_up({"CRANK_DATABASE_URL": database_url, "CRANK_LANGUAGE": "ru"})
    russian = TEXTS["ru"]
    banner = crank_up.wait_ready(russian["footer"].splitlines()[-1])
    children = descendants(crank_up.process.pid)

    assert banner.lstrip("\n").startswith(russian["ready"]), banner
    assert russian["database_server"] in banner
    assert russian["approved_note"] in banner
    assert TEXTS["en"]["approved_note"] not in banner
    check_printed_mcp_curl_lines(banner, "ru")
    check_printed_approval_curl_lines(banner, "ru")
    assert crank_up.stop(signal.SIGINT) == 0
    assert [pid for pid in children if running(pid)] == []


def test_crank_up_with_a_taken_port_exits_2_and_starts_nothing(crank_data_dir: Path) -> None:
    data_dir = crank_data_dir / "data"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        ports = {
            "control_plane": squatter.getsockname()[1],
            "gateway": free_port(),
            "sales": free_port(),
        }
        blocked = CrankUp(data_dir, ports)
        try:
            code = blocked.process.wait(timeout=30)
        finally:
            blocked.kill_everything()

    assert code == 2
    assert blocked.output == []
    stderr = blocked.stderr_path.read_text()
    assert "is taken; choose another with CRANK_CONTROL_PLANE_PORT" in stderr
    assert not (data_dir / "pgdata").exists()


def test_dev_state_file_is_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state" / devstate.STATE_FILE
    previous = os.umask(0)
    try:
        state = devstate.load_or_create_dev_state(path)
    finally:
        os.umask(previous)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(state.secret_key) >= 32
    assert parse_key(state.admin_token) is KeyKind.ADMIN
    assert devstate.load_or_create_dev_state(path) == state
    path.chmod(0o644)
    devstate.save_dev_state(state, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_dev_state_lives_in_crank_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRANK_DATA_DIR", str(tmp_path))
    assert devstate.dev_state_path() == tmp_path / devstate.STATE_FILE
    assert devstate.load_dev_state() is None


async def test_saved_dev_credentials_are_reused_and_revoked_ones_replaced(
    database_url: str,
) -> None:
    hasher = KeyHasher(TEST_SECRET_KEY)
    saved_token = generate_key(KeyKind.ADMIN)
    async with await connect(database_url) as conn:
        await seed_demo(conn, sales_port=18126)
        ws = await ensure_workspace(conn, "default", "test")
        token = await ensure_admin_token(conn, hasher, saved_token)
        key = await ensure_api_key(
            conn, hasher, ws, "test", agent="sales", kind="approval", saved=None
        )
        again = await ensure_api_key(
            conn, hasher, ws, "test", agent="sales", kind="approval", saved=key
        )
        cur = await conn.execute("SELECT id FROM api_keys")
        rows = await cur.fetchall()
        await revoke_api_key(conn, ws, "test", rows[0]["id"])
        await conn.execute("UPDATE admin_tokens SET revoked_at = now()")
        replaced_key = await ensure_api_key(
            conn, hasher, ws, "test", agent="sales", kind="approval", saved=key
        )
        replaced_token = await ensure_admin_token(conn, hasher, saved_token)
        await conn.commit()

    assert token == saved_token
    assert parse_key(key) is KeyKind.APPROVAL
    assert again == key
    assert replaced_key != key
    assert parse_key(replaced_key) is KeyKind.APPROVAL
    assert replaced_token != saved_token


def test_children_get_the_demo_api_allowlisted_not_every_private_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from control_plane.cli.up import _child_env
    from shared.settings import Settings

    monkeypatch.delenv("CRANK_ALLOW_PRIVATE_UPSTREAMS", raising=False)
    settings = Settings(upstream_allowlist=("10.0.0.5:443",))
    env = _child_env(settings, "postgresql:///crank", TEST_SECRET_KEY, 18090)
    assert "CRANK_ALLOW_PRIVATE_UPSTREAMS" not in env
    assert env["CRANK_UPSTREAM_ALLOWLIST"] == "10.0.0.5:443,127.0.0.1:18090"

    monkeypatch.setenv("CRANK_ALLOW_PRIVATE_UPSTREAMS", "false")
    env = _child_env(Settings(), "postgresql:///crank", TEST_SECRET_KEY, 18090)
    assert env["CRANK_ALLOW_PRIVATE_UPSTREAMS"] == "false"  # the user's choice stands
    assert env["CRANK_UPSTREAM_ALLOWLIST"] == "127.0.0.1:18090"


def test_children_get_the_gateway_url_as_the_public_url_unless_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from control_plane.cli.up import _child_env
    from shared.settings import Settings

    monkeypatch.delenv("CRANK_PUBLIC_URL", raising=False)
    gateway = "http://127.0.0.1:8080"
    env = _child_env(Settings(), "postgresql:///crank", TEST_SECRET_KEY, 18090, gateway)
    assert env["CRANK_PUBLIC_URL"] == gateway

    monkeypatch.setenv("CRANK_PUBLIC_URL", "https://crank.example.com")
    settings = Settings(public_url="https://crank.example.com")
    env = _child_env(settings, "postgresql:///crank", TEST_SECRET_KEY, 18090, gateway)
    assert env["CRANK_PUBLIC_URL"] == "https://crank.example.com"  # the user's choice stands


@pytest.mark.parametrize(
    ("host", "opened"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False)],  # noqa: S104
)
def test_served_on_loopback_the_children_may_call_loopback_upstreams(
    monkeypatch: pytest.MonkeyPatch, host: str, opened: bool
) -> None:
    from control_plane.cli.up import _child_env
    from shared.settings import Settings

    monkeypatch.delenv("CRANK_ALLOW_LOOPBACK_UPSTREAMS", raising=False)
    env = _child_env(Settings(host=host), "postgresql:///crank", TEST_SECRET_KEY, 18090)
    assert (env.get("CRANK_ALLOW_LOOPBACK_UPSTREAMS") == "true") is opened
    assert "CRANK_ALLOW_PRIVATE_UPSTREAMS" not in env  # other private addresses stay closed


def test_the_users_loopback_choice_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    from control_plane.cli.up import _child_env
    from shared.settings import Settings

    monkeypatch.setenv("CRANK_ALLOW_LOOPBACK_UPSTREAMS", "false")
    env = _child_env(Settings(), "postgresql:///crank", TEST_SECRET_KEY, 18090)
    assert env["CRANK_ALLOW_LOOPBACK_UPSTREAMS"] == "false"


def run_crank(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``crank ARGS`` as a newcomer runs it next to ``crank up``: no CRANK_* but the data
    directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    env["CRANK_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "control_plane.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(180)
def test_tokens_create_works_against_a_running_crank_up(start_crank_up: Any) -> None:
    """Issue #27: `crank tokens create` said `CRANK_DATABASE_URL is not set` next to a
    running `crank up`, though the CLI's 401 hint suggests it."""
    crank_up: CrankUp = start_crank_up()
    crank_up.wait_ready()
    cp = f"http://127.0.0.1:{crank_up.ports['control_plane']}"

    created = run_crank(
        crank_up.data_dir, "tokens", "create", "--role", "editor", "--workspace", "default"
    )

    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert parse_key(token) is KeyKind.ADMIN
    assert token not in created.stderr
    status, me = get_json(f"{cp}/api/v1/me", token)
    assert status == 200
    assert [(w["slug"], w["role"]) for w in me["workspaces"]] == [("default", "editor")]
    listed = run_crank(crank_up.data_dir, "tokens", "list")
    assert listed.returncode == 0, listed.stderr
    assert "editor@default" in listed.stdout
    assert crank_up.stop(signal.SIGINT) == 0

    stopped = run_crank(crank_up.data_dir, "tokens", "create", "--role", "admin")
    assert stopped.returncode == 2
    assert "no `crank up` with its embedded database runs" in stopped.stderr
    assert str(crank_up.data_dir) in stopped.stderr


@pytest.mark.timeout(180)
def test_a_second_crank_up_says_why_first_and_names_crank_data_dir(start_crank_up: Any) -> None:
    """Issue #27: the reason came after `stopped`, and was about a taken port."""
    first: CrankUp = start_crank_up()
    first.wait_ready()

    second: CrankUp = start_crank_up()
    code = second.process.wait(timeout=30)
    second.stop(signal.SIGTERM)  # closes its log; it has exited already

    assert code == 2
    # Both runs append to one log file; the first one is still running, so the only
    # `stopped` line is the second's.
    lines = second.stderr_path.read_text().splitlines()
    reason = next(i for i, line in enumerate(lines) if "another `crank up` is running" in line)
    assert reason < lines.index("crank up: stopped")
    assert lines[reason].startswith(
        f"crank up: another `crank up` is running with data directory {first.data_dir}"
    )
    assert "CRANK_DATA_DIR" in lines[reason]
    assert not any("is taken" in line for line in lines)
    assert first.process.poll() is None
    assert first.stop(signal.SIGINT) == 0
