"""A workspace secret never shows in an approval, through a real gateway process:
typed into the arguments or the approver's note, or echoed by the upstream with
every character JSON-escaped into a failed approval's ``response_payload``. The
record read, listed and answered with the approval key, and the audit row, are
masked with the workspace's masker; the approved call still runs with the real
arguments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shared.db import connect
from shared.engine.masking import MASK
from tests.support.api import Client, auth
from tests.support.approval_outcomes import (
    APPROVALS,
    GATED,
    MCP,
    Shopfront,
    finished,
    gateway_env,
    replica,
)
from tests.support.approvals import TOKEN, Shop
from tests.support.gateway import wait_until
from tests.support.masking import leaks
from tests.support.tool_calls import BASE, Caller


def escaped(text: str, *, upper: bool = False) -> str:
    """``text`` with every character a JSON ``\\u`` escape, as some upstreams write it."""
    return "".join(f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}" for c in text)


def _shows_no_secret(where: str, text: str) -> None:
    assert TOKEN not in text, where
    assert not leaks(text, [TOKEN]), (where, leaks(text, [TOKEN]))


async def test_secrets_in_arguments_note_and_an_escaped_upstream_echo_are_masked(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    shop: Shop,
    shopfront: Shopfront,
) -> None:
    arguments = {"item": f"sku-1 {TOKEN}", "request_id": "req-masked"}
    note = f"ok, token was {TOKEN}"
    key = {"Authorization": f"Bearer {shopfront.approval_key}"}
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        caller = Caller(a.http, MCP, shopfront.agent_key)
        asked = await caller.call("modern", GATED, arguments)
        approval_id = asked["structuredContent"]["approval_id"]
        listed = await a.http.get(APPROVALS, headers=key)
        read = await a.http.get(f"{APPROVALS}/{approval_id}", headers=key)
        for where, answer in (("list", listed), ("read", read)):
            assert answer.status_code == 200, answer.text
            _shows_no_secret(where, answer.text)
        assert read.json()["arguments"]["item"] == f"sku-1 {MASK}"

        # The upstream fails, echoing the token with every character escaped, both cases.
        shop.status = 422
        shop.answer = json.dumps({"error": "bad"})[:-1] + (
            f', "lower": "{escaped(TOKEN)}", "upper": "{escaped(TOKEN, upper=True)}"}}'
        )
        decided = await a.http.post(
            f"{APPROVALS}/{approval_id}/approve",
            json={"approve": "yes", "note": note},
            headers=key,
        )
        assert decided.status_code == 200, decided.text
        _shows_no_secret("decision", decided.text)
        assert decided.json()["note"] == f"ok, token was {MASK}"
        await finished(a.http, shopfront.approval_key, approval_id, "failed")
        record = await a.http.get(f"{APPROVALS}/{approval_id}", headers=key)
        _shows_no_secret("failed record", record.text)
        payload: dict[str, Any] = record.json()["response_payload"]
        upstream = json.loads(payload["upstream_text"])  # what a JSON reader makes of it
        assert upstream == {"error": "bad", "lower": MASK, "upper": MASK}

    # The call ran with the real arguments: only what is shown or recorded is masked.
    (seen,) = shop.seen
    assert seen.body["item"] == f"sku-1 {TOKEN}"
    assert seen.authorization == f"Bearer {TOKEN}"
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT arguments, note FROM approvals WHERE id = %s", (approval_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    assert row["arguments"]["item"] == f"sku-1 {TOKEN}"  # the executor's
    assert row["note"] == f"ok, token was {MASK}"
    audit = await client.get(f"{BASE}/audit", headers=auth(admin_token))
    (entry,) = [e for e in audit.json()["items"] if e["resource_name"] == approval_id]
    assert entry["details"]["note"] == f"ok, token was {MASK}"
    _shows_no_secret("audit", json.dumps(entry))


async def test_a_secret_set_after_the_call_is_masked_when_the_record_is_read(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    shop: Shop,
    shopfront: Shopfront,
) -> None:
    later = "later-secret-8d2e"
    arguments = {"item": f"sku-2 {later}", "request_id": "req-later"}
    key = {"Authorization": f"Bearer {shopfront.approval_key}"}
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        caller = Caller(a.http, MCP, shopfront.agent_key)
        asked = await caller.call("modern", GATED, arguments)
        approval_id = asked["structuredContent"]["approval_id"]
        before = await a.http.get(f"{APPROVALS}/{approval_id}", headers=key)
        assert before.json()["arguments"]["item"] == f"sku-2 {later}"
        put = await client.put(
            f"{BASE}/secrets/LATER", json={"value": later}, headers=auth(admin_token)
        )
        assert put.status_code in (200, 201), put.text

        async def masked() -> bool:
            answer = await a.http.get(f"{APPROVALS}/{approval_id}", headers=key)
            return bool(answer.json()["arguments"]["item"] == f"sku-2 {MASK}")

        await wait_until(masked, timeout_s=20)  # once the gateway's snapshot has the secret
