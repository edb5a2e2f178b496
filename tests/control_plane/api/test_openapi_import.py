"""POST /workspaces/{w}/import/openapi and ``crank import-openapi``: drafts only,
re-imports that never clobber edits, URLs through the SSRF guard, the audit log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from shared.settings import Settings
from tests.support.api import Client, auth, grant_egress, make_token
from tests.support.cli import Server, crank
from tests.support.db import TEST_SECRET_KEY
from tests.support.paths import OPENAPI_FIXTURES as FIXTURES
from tests.support.threaded_http import ThreadedServer, serve_threaded

WS = "/api/v1/workspaces/default"
IMPORT = f"{WS}/import/openapi"
UPSTREAM = "http://127.0.0.1:9/v3"  # never called here


def petstore() -> dict[str, Any]:
    document = json.loads((FIXTURES / "petstore-3.0.json").read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture
async def admin(client: Client, admin_token: str) -> str:
    created = await client.post(
        "/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin_token)
    )
    assert created.is_success, created.text
    return admin_token


async def run_import(client: Client, token: str, **body: Any) -> dict[str, Any]:
    body.setdefault("base_url", UPSTREAM)
    response = await client.post(IMPORT, json=body, headers=auth(token))
    assert response.status_code == 200, response.text
    report = response.json()
    assert isinstance(report, dict)
    return report


async def audit_actions(client: Client, token: str) -> list[dict[str, Any]]:
    page = (await client.get(f"{WS}/audit", headers=auth(token))).json()
    return [e for e in page["items"] if e["action"] == "openapi.import"]


async def test_an_import_creates_drafts_only_and_records_itself_in_the_audit_log(
    client: Client, admin: str
) -> None:
    report = await run_import(client, admin, document=petstore())
    assert len(report["created"]) == 20
    assert report["updated"] == report["unchanged"] == report["conflicts"] == []
    assert report["source"]["title"] == "Swagger Petstore"
    assert {s["name"] for s in report["secrets"]} == {
        "swagger_petstore_petstore_auth",
        "swagger_petstore_api_key",
    }
    assert any(f["rule"] == "idempotency-missing" for f in report["findings"])
    listed = (await client.get(f"{WS}/operations", headers=auth(admin))).json()["items"]
    assert len(listed) == 20
    assert all(item["latest_version"] is None for item in listed)  # never published
    [entry] = await audit_actions(client, admin)
    assert entry["details"]["created"] == 20
    assert len(entry["details"]["operations"]) == 20


async def test_a_pattern_re2_cannot_compile_is_dropped_and_the_draft_kept_with_a_note(
    client: Client, admin: str
) -> None:
    document = petstore()
    parameters = document["paths"]["/pet/findByStatus"]["get"]["parameters"]
    parameters[0]["schema"]["items"]["pattern"] = "^(?!sold)\\w+$"
    report = await run_import(client, admin, document=document)
    assert "find_pets_by_status" in report["created"]
    [note] = [
        n
        for n in report["notes"]
        if n["operation"] == "find_pets_by_status" and n["code"] == "schema_cut"
    ]
    assert "(?!" in note["message"]
    assert "RE2" in note["message"]
    draft = await client.get(f"{WS}/operations/find_pets_by_status", headers=auth(admin))
    status = draft.json()["draft"]["input"]["properties"]["status"]
    assert status["items"]["enum"] == ["available", "pending", "sold"]
    assert "pattern" not in status["items"]


async def test_a_dry_run_reports_the_same_and_writes_nothing(client: Client, admin: str) -> None:
    report = await run_import(client, admin, document=petstore(), dry_run=True, agent="pets")
    assert report["dry_run"] is True
    assert len(report["created"]) == 20
    assert report["agent"] == {"slug": "pets", "action": "create", "added": report["created"]}
    assert (await client.get(f"{WS}/operations", headers=auth(admin))).json()["items"] == []
    assert (await client.get(f"{WS}/agents/pets", headers=auth(admin))).status_code == 404
    assert await audit_actions(client, admin) == []


async def test_a_second_import_of_the_same_document_changes_nothing(
    client: Client, admin: str
) -> None:
    await run_import(client, admin, document=petstore())
    before = (await client.get(f"{WS}/operations/add_pet", headers=auth(admin))).json()
    report = await run_import(client, admin, document=petstore())
    assert report["created"] == report["updated"] == report["conflicts"] == []
    assert len(report["unchanged"]) == 20
    after = (await client.get(f"{WS}/operations/add_pet", headers=auth(admin))).json()
    assert after["revision"] == before["revision"]


async def test_a_changed_document_updates_drafts_nobody_edited(client: Client, admin: str) -> None:
    await run_import(client, admin, document=petstore())
    document = petstore()
    document["paths"]["/pet"]["post"]["summary"] = "Adds a new pet to the store"
    report = await run_import(client, admin, document=document)
    assert report["updated"] == ["add_pet"]
    assert report["conflicts"] == []
    draft = (await client.get(f"{WS}/operations/add_pet", headers=auth(admin))).json()["draft"]
    assert draft["title"] == "Adds a new pet to the store"


async def test_a_reimport_shows_a_diff_instead_of_clobbering_an_edited_draft(
    client: Client, admin: str
) -> None:
    await run_import(client, admin, document=petstore())
    current = await client.get(f"{WS}/operations/add_pet", headers=auth(admin))
    edited = {**current.json()["draft"], "description": "Adds a pet. Use when a user buys one."}
    saved = await client.put(
        f"{WS}/operations/add_pet", json=edited, headers=auth(admin, current.headers["etag"])
    )
    assert saved.is_success, saved.text
    document = petstore()
    document["paths"]["/pet"]["post"]["summary"] = "Adds a new pet to the store"

    report = await run_import(client, admin, document=document)
    [conflict] = report["conflicts"]
    assert conflict["name"] == "add_pet"
    assert conflict["reason"] == "edited_since_import"
    changes = {c["path"]: c for c in conflict["changes"]}
    assert changes["description"]["before"] == "Adds a pet. Use when a user buys one."
    assert changes["title"]["after"] == "Adds a new pet to the store"
    draft = (await client.get(f"{WS}/operations/add_pet", headers=auth(admin))).json()["draft"]
    assert draft["description"] == "Adds a pet. Use when a user buys one."

    forced = await run_import(client, admin, document=document, overwrite=True)
    assert forced["updated"] == ["add_pet"]
    draft = (await client.get(f"{WS}/operations/add_pet", headers=auth(admin))).json()["draft"]
    assert draft["title"] == "Adds a new pet to the store"
    assert draft["description"].startswith("Adds a new pet to the store")


async def test_an_operation_written_by_hand_is_not_taken_over(client: Client, admin: str) -> None:
    own = {
        "name": "get_inventory",
        "description": "Gets the stock per status. Use when the user asks what is in stock.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": "https://shop.example/inventory"},
    }
    assert (await client.post(f"{WS}/operations", json=own, headers=auth(admin))).is_success
    report = await run_import(client, admin, document=petstore())
    [conflict] = report["conflicts"]
    assert (conflict["name"], conflict["reason"]) == ("get_inventory", "not_imported")
    assert len(report["created"]) == 19


async def test_an_agent_draft_binds_the_imported_operations_and_keeps_its_own(
    client: Client, admin: str
) -> None:
    first = await run_import(
        client, admin, document=petstore(), include=["tag:store"], agent="pets"
    )
    assert first["agent"]["action"] == "create"
    assert first["source"]["filtered_out"] == 16
    second = await run_import(
        client, admin, document=petstore(), include=["tag:store", "tag:user"], agent="pets"
    )
    assert second["agent"]["action"] == "update"
    assert len(second["agent"]["added"]) == 8
    agent = (await client.get(f"{WS}/agents/pets", headers=auth(admin))).json()
    assert agent["draft"]["operations"] == first["created"] + second["agent"]["added"]
    assert agent["published"] is None


async def test_a_yaml_text_document_is_read_too(client: Client, admin: str) -> None:
    text = (FIXTURES / "petstore-swagger-2.0.yaml").read_text()
    report = await run_import(client, admin, document=text, include=["operation:getPetById"])
    assert report["created"] == ["get_pet_by_id"]
    assert report["source"]["openapi"] == "2.0"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"document": "openapi: [", "base_url": UPSTREAM}, "openapi_invalid"),
        ({"document": {"swagger": "1.2"}}, "openapi_invalid"),
        ({"document": {}, "url": "http://127.0.0.1:9/x.json"}, "bad_request"),
        ({}, "bad_request"),
        ({"document": {"openapi": "3.0.0"}, "include": ["colour:red"]}, "bad_request"),
        ({"document": {"openapi": "3.0.0"}, "agent": "Not A Slug"}, "validation_failed"),
        ({"url": "file:///etc/passwd"}, "bad_request"),
    ],
)
async def test_unusable_requests_are_refused_with_a_code(
    client: Client, admin: str, body: dict[str, Any], code: str
) -> None:
    response = await client.post(IMPORT, json=body, headers=auth(admin))
    assert (response.status_code, response.json()["code"]) == (400, code)


class _Handler(BaseHTTPRequestHandler):
    """Serves the Swagger petstore (from a thread of its own: tests.support.threaded_http)."""

    server: ThreadedServer

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        body = (FIXTURES / "petstore-swagger-2.0.yaml").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/yaml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def document_server() -> Iterator[ThreadedServer]:
    with serve_threaded(_Handler) as server:
        yield server


async def test_a_url_is_fetched_through_the_guard_when_allowlisted_and_granted(
    database_url: str, document_server: ThreadedServer
) -> None:
    settings = Settings(
        database_url=database_url,
        secret_key=TEST_SECRET_KEY,
        upstream_allowlist=(f"127.0.0.1:{document_server.port}",),
    )
    token = await make_token(database_url, "admin")
    async with AsyncTestClient(app=create_app(settings)) as allowed:
        await allowed.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(token))
        url = f"http://127.0.0.1:{document_server.port}/openapi.yaml"
        body = {"url": url, "base_url": UPSTREAM, "dry_run": True}
        # Allowlisted by the operator, but not granted to this workspace yet.
        ungranted = await allowed.post(IMPORT, json=body, headers=auth(token))
        assert (ungranted.status_code, ungranted.json()["code"]) == (400, "upstream_blocked")
        assert "egress policy does not allow 127.0.0.1" in ungranted.json()["message"]
        assert document_server.hits == []
        await grant_egress(allowed, token, "default", f"127.0.0.1:{document_server.port}")
        response = await allowed.post(IMPORT, json=body, headers=auth(token))
    assert response.status_code == 200, response.text
    assert len(response.json()["created"]) == 20
    assert len(document_server.hits) == 1


@pytest.mark.parametrize(
    "where", ["loopback", "http://169.254.169.254/latest/openapi.json", "http://[::1]:9/x"]
)
async def test_a_url_the_guard_refuses_is_never_fetched(
    client: Client, admin: str, document_server: ThreadedServer, where: str
) -> None:
    url = f"http://127.0.0.1:{document_server.port}/openapi.yaml" if where == "loopback" else where
    response = await client.post(IMPORT, json={"url": url}, headers=auth(admin))
    assert (response.status_code, response.json()["code"]) == (400, "upstream_blocked")
    assert document_server.hits == []


# -- the command line ---------------------------------------------------------------


def test_the_cli_imports_a_file_prints_the_report_and_exits_1_on_conflicts(
    server: Server, workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    spec = str(FIXTURES / "petstore-swagger-2.0.yaml")
    common = ["--workspace", workspace, "--base-url", UPSTREAM]
    dry = crank("import-openapi", spec, *common, "--dry-run", env=cli_env)
    assert dry.returncode == 0, dry.stderr
    assert "(dry run: nothing was written)" in dry.stdout
    assert "would be created (20)" in dry.stdout

    first = crank("import-openapi", spec, *common, "--agent", "pets", env=cli_env)
    assert first.returncode == 0, first.stderr
    assert "created (20): update_pet, add_pet" in first.stdout
    assert f"crank secrets set --workspace {workspace} swagger_petstore_api_key" in first.stdout
    assert "agent pets: created as a draft, 20 operations bound" in first.stdout
    assert "warning idempotency-missing" in first.stdout
    assert first.stdout.rstrip().endswith("review the drafts, then publish them")

    again = crank("import-openapi", spec, *common, "--agent", "pets", env=cli_env)
    assert again.returncode == 0, again.stderr
    assert "unchanged (20)" in again.stdout
    assert "agent pets: unchanged\n" in again.stdout  # once printed "unchangedd as a draft"

    edit_draft(server, workspace, "get_inventory", "Gets the stock. Use when asked about stock.")
    changed = tmp_path / "petstore.yaml"
    changed.write_text(Path(spec).read_text().replace("Returns pet inventories", "Counts pets"))
    conflict = crank("import-openapi", str(changed), *common, env=cli_env)
    assert conflict.returncode == 1, conflict.stderr
    assert "get_inventory: edited since the last import" in conflict.stdout
    assert "~ description:" in conflict.stdout


def test_the_cli_names_a_missing_file_and_exits_2(workspace: str, cli_env: dict[str, str]) -> None:
    missing = crank("import-openapi", "/nonexistent.yaml", "--workspace", workspace, env=cli_env)
    assert missing.returncode == 2
    assert "no such file" in missing.stderr


def edit_draft(server: Server, workspace: str, name: str, description: str) -> None:
    """Edit a draft through the API, as a person in the UI would."""
    url = f"{server.url}/api/v1/workspaces/{workspace}/operations/{name}"
    with httpx.Client(headers=auth(server.admin_token), timeout=10) as http:
        current = http.get(url)
        draft = {**current.json()["draft"], "description": description}
        saved = http.put(url, json=draft, headers={"If-Match": current.headers["etag"]})
        assert saved.is_success, saved.text
