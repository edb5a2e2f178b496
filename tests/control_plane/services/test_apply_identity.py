"""``crank apply`` of identity settings: ``identity_providers``, an agent's ``auth`` and an
operation's ``scopes`` — plan lines, dry runs, a second apply changing nothing, and the
errors (with paths into the file) for what the workspace does not hold."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.api import Client, auth, make_token
from tests.support.crank_files import APPLY, crank_file, rates_operation, snapshot

CORP = {"name": "corp", "issuer": "https://id.example.com", "groups_claim": "groups"}
AGENT_AUTH = {"providers": ["corp"], "scopes": ["orders:read"]}


def identity_file(**agent_changes: Any) -> dict[str, Any]:
    file = crank_file(identity_providers=[CORP])
    file["operations"][0] = rates_operation(scopes=["rates:read"])
    file["agents"][0]["auth"] = {**AGENT_AUTH, **agent_changes}
    return file


async def post_apply(client: Client, token: str, file: Any, **query: str) -> dict[str, Any]:
    """The plan; 200 when applied, 400 when it carries errors."""
    answer = await client.post(APPLY, params=query, json=file, headers=auth(token))
    plan: dict[str, Any] = answer.json()
    assert answer.status_code == (400 if plan.get("errors") else 200), answer.text
    return plan


async def test_dry_run_plans_then_apply_writes_then_a_second_apply_changes_nothing(
    client: Client, acme: str, database_url: str
) -> None:
    before = await snapshot(database_url)
    dry = await post_apply(client, acme, identity_file(), publish="true", dry_run="true")
    assert dry["errors"] == []
    first_item = dry["items"][0]
    assert (first_item["kind"], first_item["name"], first_item["action"]) == (
        "identity_provider",
        "corp",
        "create",
    )
    assert await snapshot(database_url) == before  # a dry run leaves nothing behind

    first = await post_apply(client, acme, identity_file(), publish="true")
    assert first["changed"] is True
    provider = await client.get(
        "/api/v1/workspaces/acme/identity-providers/corp", headers=auth(acme)
    )
    assert provider.json()["groups_claim"] == "groups"
    agent = (
        await client.get("/api/v1/workspaces/acme/agents/currency-rates", headers=auth(acme))
    ).json()
    expected = {"providers": ["corp"], "agent_keys": True, "scopes": ["orders:read"]}
    assert agent["draft"]["auth"] == expected
    assert agent["published"]["auth"] == expected  # a publish carries it to the gateways
    operation = await client.get(
        "/api/v1/workspaces/acme/operations/frankfurter_latest_rate", headers=auth(acme)
    )
    assert operation.json()["draft"]["scopes"] == ["rates:read"]

    after_first = await snapshot(database_url)
    second = await post_apply(client, acme, identity_file(), publish="true")
    assert second["changed"] is False
    assert {i["action"] for i in second["items"]} == {"unchanged"}
    assert await snapshot(database_url) == after_first

    changed = identity_file()
    changed["identity_providers"][0] = {**CORP, "leeway_s": 60}
    third = await post_apply(client, acme, changed)
    assert third["items"][0]["action"] == "update"


async def test_a_file_without_identity_leaves_the_stored_forms_as_before(
    client: Client, acme: str, database_url: str
) -> None:
    await post_apply(client, acme, crank_file(), publish="true")
    # Defaults left out, so specs stored before these fields existed still compare equal.
    with psycopg.connect(database_url) as conn:
        agent = conn.execute("SELECT draft, published FROM agents").fetchone()
        specs = conn.execute(
            "SELECT draft FROM operations UNION ALL SELECT spec FROM operation_versions"
        ).fetchall()
    assert agent is not None
    assert "auth" not in agent[0]
    assert "auth" not in agent[1]
    assert all("scopes" not in spec for (spec,) in specs)


async def test_what_the_workspace_lacks_is_refused_with_a_path_into_the_file(
    client: Client, acme: str, database_url: str
) -> None:
    before = await snapshot(database_url)
    unknown = crank_file()
    unknown["agents"][0]["auth"] = {"providers": ["nobody"]}
    plan = await post_apply(client, acme, unknown)
    assert [e["field"] for e in plan["errors"]] == ["agents[0].auth.providers[0]"]
    assert "no identity provider named 'nobody'" in plan["errors"][0]["message"]

    no_secret = crank_file(
        identity_providers=[
            {**CORP, "introspection": {"client_id": "crank", "client_secret": "IDP_CLIENT"}}
        ]
    )
    plan = await post_apply(client, acme, no_secret)
    assert [e["field"] for e in plan["errors"]] == [
        "identity_providers[0].introspection.client_secret"
    ]
    assert await snapshot(database_url) == before


async def test_the_file_alone_is_checked_before_anything_is_written(
    client: Client, acme: str
) -> None:
    file = crank_file(
        identity_providers=[
            {"name": "corp", "issuer": "http://id.example.com", "algorithms": ["HS256"]},
            {"name": "corp", "issuer": "https://other.example.com"},
        ]
    )
    file["operations"][0] = rates_operation(scopes=["has space"])
    file["agents"][0]["auth"] = {"providers": ["corp", "corp"], "scopes": ['"quoted"']}
    plan = await post_apply(client, acme, file)
    assert sorted(e["field"] for e in plan["errors"]) == [
        "agents[0].auth.providers[1]",
        "agents[0].auth.scopes[0]",
        "identity_providers[0].issuer",  # TrustedIssuer names its first problem
        "identity_providers[1].name",
        "operations[0].scopes[0]",
    ]


async def test_unknown_fields_get_a_did_you_mean(client: Client, acme: str) -> None:
    file = crank_file(identity_providers=[{**CORP, "subject_clam": "email"}])
    answer = await client.post(APPLY, json=file, headers=auth(acme))
    assert answer.status_code == 400
    assert "did you mean `subject_claim`?" in answer.text
    file = crank_file()
    file["agents"][0]["auth"] = {"agent_key": False}
    answer = await client.post(APPLY, json=file, headers=auth(acme))
    assert "did you mean `agent_keys`?" in answer.text


async def test_an_agent_refusing_keys_must_name_a_provider(client: Client, acme: str) -> None:
    keyless = identity_file(agent_keys=False)
    assert (await post_apply(client, acme, keyless, publish="true"))["errors"] == []
    nobody = identity_file(agent_keys=False, providers=[])
    drafts = await post_apply(client, acme, nobody)
    assert [e["field"] for e in drafts["errors"]] == ["agents[0].auth.agent_keys"]
    assert "agent keys are the only way in" in drafts["errors"][0]["message"]


async def test_a_provider_an_agent_names_cannot_be_deleted(client: Client, acme: str) -> None:
    await post_apply(client, acme, identity_file())
    url = "/api/v1/workspaces/acme/identity-providers/corp"
    etag = (await client.get(url, headers=auth(acme))).headers["etag"]
    refused = await client.delete(url, headers=auth(acme, etag))
    assert refused.status_code == 409
    assert "currency-rates" in refused.json()["message"]


async def test_an_editor_applies_providers_only_as_they_are(
    client: Client, acme: str, database_url: str
) -> None:
    editor = await make_token(database_url, "editor", "acme", name="ed")
    refused = await post_apply(client, editor, identity_file())
    assert [e["field"] for e in refused["errors"]] == ["identity_providers[0]"]
    assert "needs the owner role; you are editor" in refused["errors"][0]["message"]

    await post_apply(client, acme, identity_file())  # the instance admin creates it
    unchanged = await post_apply(client, editor, identity_file())
    assert unchanged["errors"] == []
    assert unchanged["items"][0]["action"] == "unchanged"
