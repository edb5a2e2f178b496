"""The linter on the API: publishes refused with 422 and findings, warnings returned,
``apply`` refusing a file with lint errors, and the lint routes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from control_plane.lint import Finding
from control_plane.lint.findings import finding
from control_plane.services import operations
from shared.engine.spec import OperationSpec
from tests.support.api import Client, auth, make_token
from tests.support.crank_files import APPLY, crank_file, delete_operation, rates_operation, snapshot

WS = "/api/v1/workspaces/acme"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> str:
    response = await client.post(
        "/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin_token)
    )
    assert response.status_code == 201, response.text
    return admin_token


def vague_operation(**changes: Any) -> dict[str, Any]:
    return rates_operation(name="call_api", description="Выполняет запрос к API.", **changes)


def rules(body: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
    return [(f["rule"], f["severity"], f["resource"], f["field"]) for f in body["findings"]]


async def create_operation(client: Client, token: str, spec: dict[str, Any]) -> str:
    response = await client.post(f"{WS}/operations", json=spec, headers=auth(token))
    assert response.status_code == 201, response.text
    return str(response.headers["etag"])


# --- operation publish ---------------------------------------------------------------


async def test_publish_with_lint_errors_is_refused_with_422_and_publishes_nothing(
    client: Client, acme: str, database_url: str
) -> None:
    etag = await create_operation(client, acme, vague_operation())
    before = await snapshot(database_url)

    response = await client.post(f"{WS}/operations/call_api/publish", headers=auth(acme, etag))

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "lint_failed"
    assert rules(body) == [
        ("name-generic", "error", "operation:call_api", "name"),
        ("description-vague", "error", "operation:call_api", "description"),
    ]
    assert [e["field"] for e in body["errors"]] == ["name", "description"]
    assert body["errors"][0]["message"].endswith("[name-generic]")
    assert await snapshot(database_url) == before
    read = await client.get(f"{WS}/operations/call_api", headers=auth(acme))
    assert read.json()["latest_version"] is None


async def test_publish_with_warnings_succeeds_and_returns_them(client: Client, acme: str) -> None:
    spec = rates_operation(response={"select": None})
    etag = await create_operation(client, acme, spec)

    response = await client.post(
        f"{WS}/operations/frankfurter_latest_rate/publish", headers=auth(acme, etag)
    )

    assert response.status_code == 201, response.text
    body = response.json()
    assert body["version"] == 1
    assert rules(body) == [
        ("response-select", "warning", "operation:frankfurter_latest_rate", "response.select")
    ]
    assert body["findings"][0]["hint"]


async def test_clean_publish_answers_empty_findings(client: Client, acme: str) -> None:
    etag = await create_operation(client, acme, rates_operation())
    response = await client.post(
        f"{WS}/operations/frankfurter_latest_rate/publish", headers=auth(acme, etag)
    )
    assert response.status_code == 201, response.text
    assert response.json()["findings"] == []


async def test_rollback_runs_the_linter_like_a_publish(
    client: Client, acme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version published before a rule existed is not published again unchecked."""
    etag = await create_operation(client, acme, rates_operation())
    await client.post(f"{WS}/operations/frankfurter_latest_rate/publish", headers=auth(acme, etag))
    changed = await client.put(
        f"{WS}/operations/frankfurter_latest_rate",
        json=rates_operation(title="Changed"),
        headers=auth(acme, etag),
    )
    published = await client.post(
        f"{WS}/operations/frankfurter_latest_rate/publish",
        headers=auth(acme, changed.headers["etag"]),
    )
    assert published.status_code == 201, published.text

    def stricter(spec: OperationSpec) -> list[Finding]:  # a rule added after version 1
        flagged = spec.title != "Changed"
        return [finding("description-vague", "operation:x", "description", "new")] * flagged

    monkeypatch.setattr(operations, "lint_operation", stricter)
    rollback = await client.post(
        f"{WS}/operations/frankfurter_latest_rate/versions/1/rollback",
        headers=auth(acme, published.headers["etag"]),
    )

    assert rollback.status_code == 422, rollback.text
    assert [f["rule"] for f in rollback.json()["findings"]] == ["description-vague"]


# --- agent publish -------------------------------------------------------------------


async def test_agent_publish_returns_lint_warnings_about_look_alike_tools(
    client: Client, acme: str
) -> None:
    twins = [rates_operation(), rates_operation(name="frankfurter_latest_rates")]
    file = crank_file(operations=twins, agents=[])
    assert (await client.post(APPLY, json=file, headers=auth(acme))).status_code == 200
    agent = await client.post(
        f"{WS}/agents",
        json={"slug": "rates", "operations": [op["name"] for op in twins]},
        headers=auth(acme),
    )

    response = await client.post(
        f"{WS}/agents/rates/publish", headers=auth(acme, agent.headers["etag"])
    )

    assert response.status_code == 200, response.text
    assert rules(response.json()) == [
        ("agent-similar-tools", "warning", "agent:rates", "operations[1]")
    ]


async def test_agent_publish_with_too_many_tools_is_refused_with_422(
    client: Client, acme: str, database_url: str
) -> None:
    names = [f"rates_of_currency_{index}" for index in range(129)]
    operations = [
        rates_operation(name=name, description=f"Gets rate table {name}. Use when asked.")
        for name in names
    ]
    file = crank_file(operations=operations, agents=[])
    created = await client.post(APPLY, json=file, headers=auth(acme))
    assert created.status_code == 200, created.text
    agent = await client.post(
        f"{WS}/agents", json={"slug": "everything", "operations": names}, headers=auth(acme)
    )
    assert agent.status_code == 201, agent.text  # drafts are never refused by the linter
    before = await snapshot(database_url)

    response = await client.post(
        f"{WS}/agents/everything/publish", headers=auth(acme, agent.headers["etag"])
    )

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "lint_failed"
    assert rules(body) == [("agent-tool-limit", "error", "agent:everything", "operations")]
    assert await snapshot(database_url) == before


# --- apply ---------------------------------------------------------------------------


@pytest.mark.parametrize("query", [{"publish": "true"}, {}, {"dry_run": "true"}])
async def test_apply_with_lint_errors_is_refused_whole_and_writes_nothing(
    client: Client, acme: str, database_url: str, query: dict[str, str]
) -> None:
    file = crank_file(operations=[rates_operation(), vague_operation(), delete_operation()])
    file["agents"][0]["operations"].append("call_api")
    before = await snapshot(database_url)

    response = await client.post(APPLY, params=query, json=file, headers=auth(acme))

    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "lint_failed"
    assert "nothing was applied" in body["message"]
    assert [e["field"] for e in body["errors"]] == [
        "operations[1].name",
        "operations[1].description",
    ]
    errors = [(f["rule"], f["resource"]) for f in body["findings"] if f["severity"] == "error"]
    assert errors == [
        ("name-generic", "operation:call_api"),
        ("description-vague", "operation:call_api"),
    ]
    assert await snapshot(database_url) == before


async def test_apply_plan_carries_lint_warnings(client: Client, acme: str) -> None:
    response = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert response.status_code == 200, response.text
    assert rules(response.json()) == [
        ("response-select", "warning", "operation:delete_order", "response.select")
    ]


async def test_apply_lints_agents_against_operations_already_in_the_workspace(
    client: Client, acme: str
) -> None:
    first = crank_file(agents=[])
    assert (await client.post(APPLY, json=first, headers=auth(acme))).status_code == 200
    twin = rates_operation(name="frankfurter_latest_rates")
    second = crank_file(operations=[twin])
    second["agents"][0]["operations"] = ["frankfurter_latest_rate", "frankfurter_latest_rates"]

    response = await client.post(APPLY, json=second, headers=auth(acme))

    assert response.status_code == 200, response.text
    assert ("agent-similar-tools", "warning", "agent:currency-rates", "operations[1]") in rules(
        response.json()
    )


# --- the lint routes -----------------------------------------------------------------


async def test_lint_route_reports_validation_errors_and_findings_and_writes_nothing(
    client: Client, acme: str, database_url: str
) -> None:
    viewer = await make_token(database_url, "viewer", "acme")
    file = copy.deepcopy(crank_file(operations=[vague_operation(), delete_operation()]))
    file["operations"][1]["safety"] = {"confirmation": False}
    file["agents"][0]["operations"] = ["call_api", "missing_op"]
    before = await snapshot(database_url)

    response = await client.post(f"{WS}/lint", json=file, headers=auth(viewer))

    assert response.status_code == 200, response.text
    assert rules(response.json()) == [
        ("spec-invalid", "error", "agent:currency-rates", "operations[1]"),
        ("name-generic", "error", "operation:call_api", "name"),
        ("description-vague", "error", "operation:call_api", "description"),
        ("response-select", "warning", "operation:delete_order", "response.select"),
        ("delete-confirmation", "error", "operation:delete_order", "safety.confirmation"),
    ]
    assert await snapshot(database_url) == before


async def test_lint_route_of_a_clean_file_answers_no_findings(client: Client, acme: str) -> None:
    file = crank_file(operations=[rates_operation()])
    file["agents"][0]["operations"] = ["frankfurter_latest_rate"]
    response = await client.post(f"{WS}/lint", json=file, headers=auth(acme))
    assert response.status_code == 200, response.text
    assert response.json() == {"findings": []}


async def test_lint_route_refuses_a_body_that_is_not_an_operation_file(
    client: Client, acme: str
) -> None:
    response = await client.post(f"{WS}/lint", json={"operations": 1}, headers=auth(acme))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"


async def test_stored_drafts_are_linted(client: Client, acme: str) -> None:
    await create_operation(client, acme, vague_operation())
    await client.post(
        f"{WS}/agents", json={"slug": "ag", "operations": ["call_api"]}, headers=auth(acme)
    )

    operation = await client.get(f"{WS}/operations/call_api/lint", headers=auth(acme))
    agent = await client.get(f"{WS}/agents/ag/lint", headers=auth(acme))
    missing = await client.get(f"{WS}/agents/nobody/lint", headers=auth(acme))

    assert operation.status_code == 200, operation.text
    assert [f["rule"] for f in operation.json()["findings"]] == [
        "name-generic",
        "description-vague",
    ]
    assert agent.json() == {"findings": []}
    assert missing.status_code == 404
