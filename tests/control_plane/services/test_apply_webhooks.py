"""An agent's ``webhooks`` in the operation file: ``crank apply`` creates the missing
subscriptions (their secrets in the plan once), keeps identical ones, revokes the
rest, leaves them alone when the key is absent, never in a dry run; export writes
them back without secrets."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import yaml

from control_plane.cli.apply_cmd import render_plan
from control_plane.services.apply_plan import ApplyPlan
from shared.db import connect
from tests.support.api import Client, auth
from tests.support.crank_files import APPLY, crank_file

HOOKS = "/api/v1/workspaces/acme/agents/currency-rates/webhooks"
HOOK = {"url": "https://hooks.example.com/crank", "events": ["approval.created"]}
SLACK = {"url": "https://hooks.slack.example/services/T/B/x", "format": "slack"}


def with_webhooks(webhooks: list[dict[str, Any]] | None) -> dict[str, Any]:
    file = crank_file()
    if webhooks is not None:
        file["agents"][0]["webhooks"] = webhooks
    return file


async def apply(client: Client, token: str, file: dict[str, Any], **params: str) -> dict[str, Any]:
    answer = await client.post(APPLY, params=params, json=file, headers=auth(token))
    assert answer.status_code == 200, answer.text
    plan: dict[str, Any] = answer.json()
    return plan


async def live(client: Client, token: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.get(HOOKS, headers=auth(token))).json()["items"]
    return items


def changes(plan: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [
        (c["action"], c["url"], c["secret"] is not None)
        for item in plan["items"]
        for c in item["webhooks"]
    ]


async def test_apply_creates_keeps_and_revokes_subscriptions_and_is_idempotent(
    client: Client, acme: str, database_url: str
) -> None:
    first = await apply(client, acme, with_webhooks([HOOK, SLACK]))
    assert changes(first) == [("create", HOOK["url"], True), ("create", SLACK["url"], True)]
    secrets = [c["secret"] for c in first["items"][-1]["webhooks"]]
    assert all(secret.startswith("whsec_") for secret in secrets)
    assert [(h["url"], h["events"], h["format"]) for h in await live(client, acme)] == [
        (HOOK["url"], ["approval.created"], "standard"),
        (
            SLACK["url"],
            [
                "approval.created",
                "approval.decided",
                "approval.completed",
                "approval.failed",
                "approval.expired",
            ],
            "slack",
        ),
    ]
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT draft FROM agents WHERE slug = 'currency-rates'")
        row = await cur.fetchone()
    assert row is not None
    assert "webhooks" not in row["draft"]  # subscriptions are not part of the draft

    again = await apply(client, acme, with_webhooks([SLACK, HOOK]))
    assert again["changed"] is False
    assert changes(again) == []
    absent = await apply(client, acme, with_webhooks(None))
    assert absent["changed"] is False
    assert len(await live(client, acme)) == 2

    narrowed = {**HOOK, "events": ["approval.created", "approval.expired"]}
    moved = await apply(client, acme, with_webhooks([narrowed, SLACK]))
    assert moved["changed"] is True
    assert changes(moved) == [("delete", HOOK["url"], False), ("create", HOOK["url"], True)]
    emptied = await apply(client, acme, with_webhooks([]))
    assert changes(emptied) == [("delete", SLACK["url"], False), ("delete", HOOK["url"], False)]
    assert await live(client, acme) == []


async def test_a_dry_run_shows_the_changes_without_secrets_and_writes_nothing(
    client: Client, acme: str
) -> None:
    plan = await apply(client, acme, with_webhooks([HOOK]), dry_run="true")
    assert plan["changed"] is True
    assert changes(plan) == [("create", HOOK["url"], False)]
    assert (await client.get(HOOKS, headers=auth(acme))).status_code == 404  # no agent either


@pytest.mark.parametrize(
    ("webhooks", "field"),
    [
        ([{"url": "ftp://hooks.example.com/"}], "agents[0].webhooks[0].url"),
        ([{**HOOK, "events": ["approval.maybe"]}], "agents[0].webhooks[0].events[0]"),
        ([HOOK, HOOK], "agents[0].webhooks[1].url"),
    ],
)
async def test_invalid_webhooks_refuse_the_file_naming_the_path(
    client: Client, acme: str, webhooks: list[dict[str, Any]], field: str
) -> None:
    answer = await client.post(APPLY, json=with_webhooks(webhooks), headers=auth(acme))
    assert answer.status_code == 400, answer.text
    assert field in [error["field"] for error in answer.json()["errors"]]


async def test_export_lists_live_subscriptions_without_secrets_and_applies_back_unchanged(
    client: Client, acme: str
) -> None:
    created = await apply(client, acme, with_webhooks([HOOK, SLACK]))
    secrets = [c["secret"] for c in created["items"][-1]["webhooks"]]
    exported = await client.get("/api/v1/workspaces/acme/export", headers=auth(acme))
    assert exported.status_code == 200, exported.text
    assert all(secret not in exported.text for secret in secrets)
    document = yaml.safe_load(exported.text)
    assert document["agents"][0]["webhooks"] == [HOOK, SLACK]  # defaults left out
    back = await apply(client, acme, document)
    assert back["changed"] is False


def test_the_cli_prints_a_created_secret_once_and_a_dry_run_none() -> None:
    plan = msgspec.convert(
        {
            "workspace": "acme",
            "dry_run": False,
            "changed": True,
            "items": [
                {
                    "kind": "agent",
                    "name": "sales",
                    "action": "unchanged",
                    "webhooks": [
                        {
                            "action": "create",
                            "id": "whsub_1",
                            "url": HOOK["url"],
                            "events": HOOK["events"],
                            "format": "standard",
                            "secret": "whsec_c2VjcmV0",
                        }
                    ],
                }
            ],
        },
        ApplyPlan,
    )
    lines = render_plan(plan)
    assert f"  agent sales: created whsub_1 {HOOK['url']} (standard)" in lines
    assert "    signing secret (shown once, store it now): whsec_c2VjcmV0" in lines
    assert lines[-1] == "created 0, updated 0, published 0, 1 webhook changed; 1 unchanged"
    dry = msgspec.structs.replace(plan, dry_run=True)
    dry.items[0].webhooks[0].secret = None
    assert not any("whsec_" in line for line in render_plan(dry))
