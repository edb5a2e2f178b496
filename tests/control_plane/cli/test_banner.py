"""What ``crank up`` prints (control_plane/cli/banner.py): each language's banner in its
own language, the quickstart's sample is what it prints, and its curl lines run as printed
against the demo's gateway: initialize and tools/list, then the approver's list, read,
approve and deny of a real refund's approval, in English and with CRANK_LANGUAGE=ru.
The console's approver snippet, made by the same function, runs the same way."""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from control_plane.cli.banner import TEXTS, render
from control_plane.cli.devkeys import ensure_api_key
from control_plane.cli.devstate import DevState
from control_plane.cli.seed import ensure_workspace
from control_plane.console.mcp_clients import (
    APPROVAL_KEY_PLACEHOLDER,
    approver_snippet,
    endpoint,
)
from control_plane.demo import DEMO_WORKSPACE
from shared.crypto import KeyHasher
from shared.db import connect
from shared.engine.errors import Language
from tests.support.client_snippets import (
    APPROVAL_ID_PLACEHOLDER,
    printed_curl_lines,
    run_bash_json,
    run_mcp_curls,
)
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import DemoGateway, demo_gateway
from tests.support.paths import DOCS_DIR

CYRILLIC = re.compile("[а-яА-ЯёЁ]")  # noqa: RUF001 - Cyrillic on purpose
RATES_TOOLS = ["frankfurter_latest_rate"]
LANGUAGES: list[Language] = ["en", "ru"]


def _sample_state() -> DevState:
    return DevState(
        secret_key="unused",
        admin_token="crk_admin_" + "A" * 49,
        agent_keys={"currency-rates": "crk_agent_" + "B" * 49, "sales": "crk_agent_" + "C" * 49},
        approval_keys={"sales": "crk_approval_" + "D" * 49},
        control_plane_url="http://127.0.0.1:8000",
        gateway_url="http://127.0.0.1:8080",
    )


def banner(state: DevState, language: Language) -> str:
    return render(
        state,
        dev_state_file=Path("/home/you/.local/share/crank/dev-state.json"),
        database=Path("/home/you/.local/share/crank/pgdata"),
        sales_url="http://127.0.0.1:8090",
        language=language,
        console_link="http://127.0.0.1:8000/ui/sign-in/link?code=CODE",
    )


def words(line: str) -> str:
    """A line's own words: none on a curl line, else without URLs, keys and paths."""
    if re.match(r"\s*(curl |-H |--data )", line):
        return ""
    return re.sub(r"\S*(://|crk_|/home/)\S*", "", line)


def test_the_english_banner_is_english_and_the_russian_one_russian() -> None:
    english, russian = (banner(_sample_state(), language) for language in LANGUAGES)
    assert CYRILLIC.search(english) is None, english  # the decision notes too
    assert "The user approved the action" in english
    assert "Пользователь подтвердил действие" in russian
    # Every line of the Russian banner that has words has Russian ones; what stays in
    # Latin letters is names (MCP, control plane, crank apply, tools/call).
    for line in russian.splitlines():
        if re.search("[a-z]{3,}", words(line)):
            assert CYRILLIC.search(line), line


def test_the_quickstart_sample_is_what_the_banner_prints() -> None:
    """docs/quickstart.md shows the whole banner, the approver's block included."""
    page = (DOCS_DIR / "quickstart.md").read_text(encoding="utf-8")
    found = re.search(r"^```\n(Crank is up\.\n.*?)^```$", page, re.M | re.S)
    assert found is not None
    sample = found[1]

    def value(label: str) -> str:
        match = re.search(rf"^  {label}\s+(\S+)", sample, re.M)
        assert match is not None, label
        return match[1]

    state = DevState(
        secret_key="unused",
        admin_token=value("admin token"),
        agent_keys={
            "currency-rates": value("currency-rates agent key"),
            "sales": value("sales agent key"),
        },
        approval_keys={"sales": value("sales approval key")},
        control_plane_url=value("control plane"),
        gateway_url=value("MCP gateway").split("/mcp/")[0],
    )
    link = re.search(r"^  (\S+/ui/sign-in/link\?code=\S+)$", sample, re.M)
    assert link is not None
    printed = render(
        state,
        dev_state_file=Path("/home/you/.local/share/crank/dev-state.json"),
        database=Path("/home/you/.local/share/crank/pgdata"),
        sales_url=value("demo sales API"),
        language="en",
        console_link=link[1],
    )
    assert sample == printed.lstrip("\n") + "\n"


# --- the curl lines as printed, against the demo's gateway ------------------------------------


async def _demo_state(demo: DemoGateway, database_url: str) -> DevState:
    """The dev state ``crank up`` would have for this demo: its keys, its gateway's URL."""
    async with await connect(database_url) as conn:
        workspace = await ensure_workspace(conn, DEMO_WORKSPACE, "tests")
        rates_key = await ensure_api_key(
            conn,
            KeyHasher(TEST_SECRET_KEY),
            workspace,
            "tests",
            agent="currency-rates",
            kind="agent",
            saved=None,
        )
        await conn.commit()
    return DevState(
        secret_key=TEST_SECRET_KEY,
        admin_token="crk_admin_" + "A" * 49,  # the control plane is not part of these tests
        agent_keys={"currency-rates": rates_key, "sales": demo.agent_key},
        approval_keys={"sales": demo.approval_key},
        control_plane_url="http://127.0.0.1:1",
        gateway_url=demo.gateway.url,
    )


async def _ask_for_a_refund(demo: DemoGateway, request_id: str) -> str:
    """A tools/call of sales_create_refund with the sales agent key (the official SDK, the
    2025 handshake the banner's curl lines use): the approval_id it answers."""
    arguments = {
        "request_id": request_id,
        "order_id": "ord_456",
        "amount_minor_units": 100,
        "currency": "EUR",
        "reason": "requested_by_customer",
    }
    url = f"{demo.gateway.url}/mcp/v1/{DEMO_WORKSPACE}/sales"
    headers = {"Authorization": f"Bearer {demo.agent_key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=20) as http,
        McpClient(streamable_http_client(url, http_client=http), mode="legacy") as mcp,
    ):
        called = await mcp.call_tool("sales_create_refund", arguments)
    structured = called.structured_content
    assert structured is not None
    assert structured["status"] == "approval_required", structured
    return str(structured["approval_id"])


async def run_approval_lines(demo: DemoGateway, commands: list[str], language: Language) -> None:
    """The approver's four lines as printed, <approval_id> replaced as they ask: list and
    read show the pending approval, approve and deny decide two of them with the note
    of ``language``."""
    listing, reading, approving, denying = commands
    assert all(APPROVAL_ID_PLACEHOLDER in line for line in (reading, approving, denying))
    first = await _ask_for_a_refund(demo, f"refund-{language}-approved")
    second = await _ask_for_a_refund(demo, f"refund-{language}-denied")

    listed = run_bash_json(listing)
    assert {first, second} <= {item["id"] for item in listed["items"]}, listed
    read = run_bash_json(reading.replace(APPROVAL_ID_PLACEHOLDER, first))
    assert (read["id"], read["status"]) == (first, "pending")

    approved = run_bash_json(approving.replace(APPROVAL_ID_PLACEHOLDER, first))
    assert (approved["status"], approved["note"]) == ("approved", TEXTS[language]["approved_note"])
    denied = run_bash_json(denying.replace(APPROVAL_ID_PLACEHOLDER, second))
    assert (denied["status"], denied["note"]) == ("denied", TEXTS[language]["denied_note"])


@pytest.mark.parametrize("language", LANGUAGES)
async def test_the_printed_curl_lines_run_as_printed(
    database_url: str, tmp_path: Path, language: Language
) -> None:
    async with demo_gateway(database_url, tmp_path) as demo:
        printed = banner(await _demo_state(demo, database_url), language)
        texts = TEXTS[language]
        mcp_block = printed[
            printed.index(f"\n{texts['mcp']}\n") : printed.index(texts["approvals"])
        ]
        assert run_mcp_curls(printed_curl_lines(mcp_block)) == RATES_TOOLS
        approvals_block = printed[printed.index(texts["approvals"]) :].split("\n\n")[0]
        await run_approval_lines(demo, printed_curl_lines(approvals_block), language)


async def test_the_consoles_approver_lines_run_as_printed(
    database_url: str, tmp_path: Path
) -> None:
    async with demo_gateway(database_url, tmp_path) as demo:
        target = endpoint(demo.gateway.url, "", DEMO_WORKSPACE, "sales")
        text = approver_snippet(target).text.replace(APPROVAL_KEY_PLACEHOLDER, demo.approval_key)
        await run_approval_lines(demo, printed_curl_lines(text + "\n"), "en")
