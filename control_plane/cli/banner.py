"""What ``crank up`` prints once everything answers: URLs, credentials, curl lines.

It prints the dev admin token and the demo keys on purpose: ``crank up`` is a
local development tool and these are its throwaway credentials, also kept in
the 0600 dev state file. Nothing else Crank runs prints a secret.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from control_plane.cli.devstate import DevState
from control_plane.demo import DEMO_WORKSPACE

READY_LINE = "Crank is up."
APPROVALS_HEADING = "Human approval (the sales approval key):"
# The seed's decision bodies, verbatim.
APPROVE_BODY = '{ "approve": "yes", "note": "Пользователь подтвердил действие" }'
DENY_BODY = '{ "approve": "no", "note": "Пользователь отклонил действие" }'
PROTOCOL_VERSION = "2025-06-18"


def client_host(host: str) -> str:
    """Where a local client connects when the servers bind ``host``."""
    if host in ("", "0.0.0.0"):  # noqa: S104 - a bind address, not a bind
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _jsonrpc(id_: int, method: str, params: dict[str, object]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})


def _curl(url: str, token: str, *, accept: str, session: bool, data: str) -> str:
    lines = [
        f"curl -i {url}" if not session else f"curl {url}",
        f"-H 'Authorization: Bearer {token}'",
        "-H 'Content-Type: application/json'",
        f"-H 'Accept: {accept}'",
    ]
    if session:
        lines.append("-H 'MCP-Session-Id: <MCP-Session-Id from the initialize answer>'")
    lines.append(f"--data {shlex.quote(data)}")
    return "  " + " \\\n      ".join(lines)


def approval_curls(approvals: str, token: str) -> list[str]:
    """The seed's approval lines (mcp-interface.md): list, read, approve, deny."""
    auth = f"-H 'Authorization: Bearer {token}'"
    json_body = "-H 'Content-Type: application/json'"
    one = f"{approvals}/<approval_id>"
    return [
        f"  curl {approvals} \\\n      {auth}",
        f"  curl {one} \\\n      {auth}",
        f"  curl {one}/approve \\\n      {auth} \\\n      {json_body} \\\n"
        f"      --data {shlex.quote(APPROVE_BODY)}",
        f"  curl {one}/deny \\\n      {auth} \\\n      {json_body} \\\n"
        f"      --data {shlex.quote(DENY_BODY)}",
    ]


def mcp_curls(mcp_url: str, agent_key: str) -> list[str]:
    """The seed's MCP curl lines (initialize, then tools/list in its session); the
    console's agent page shows the same lines for any agent."""
    initialize = _jsonrpc(
        1,
        "initialize",
        {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "1.0.0"},
        },
    )
    tools_list = _jsonrpc(2, "tools/list", {})
    return [
        _curl(
            mcp_url,
            agent_key,
            accept="application/json, text/event-stream",
            session=False,
            data=initialize,
        ),
        _curl(mcp_url, agent_key, accept="application/json", session=True, data=tools_list),
    ]


def render(
    state: DevState,
    *,
    dev_state_file: Path,
    database: str,
    sales_url: str,
    gateway_running: bool,
    console_link: str = "",
) -> str:
    """The text ``crank up`` prints when ready; it shows the dev credentials on purpose."""
    cp = state.control_plane_url
    mcp = f"{state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/currency-rates"
    rates_key = state.agent_keys.get("currency-rates", "")
    gateway_note = "" if gateway_running else "   (gateway: next release, not running yet)"
    lines = [
        "",
        READY_LINE,
        "",
        f"  control plane    {cp}   (API docs: {cp}/api/v1/schema/docs)",
        f"  web console      {cp}/ui/",
        f"  MCP gateway      {mcp}{gateway_note}",
        f"  approver inbox   {state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/sales/approvals/inbox",
        f"  demo sales API   {sales_url}",
        f"  database         {database}",
        "",
        f"Local development credentials, printed on purpose (also in {dev_state_file}, mode 0600):",
        f"  admin token                {state.admin_token}",
        f"  currency-rates agent key   {rates_key}",
        f"  sales agent key            {state.agent_keys.get('sales', '')}",
        f"  sales approval key         {state.approval_keys.get('sales', '')}",
        "",
        *(
            [
                "Sign in to the web console as the dev admin (a one-time link, valid 1 hour):",
                f"  {console_link}",
                "",
            ]
            if console_link
            else []
        ),
        "Try it:",
        f"  curl {cp}/api/v1/workspaces -H 'Authorization: Bearer {state.admin_token}'",
        "",
        "MCP:" if gateway_running else "MCP (gateway: next release; these answer once it runs):",
        *mcp_curls(mcp, rates_key),
        "",
        APPROVALS_HEADING,
        "  A tools/call of sales_create_refund with the sales agent key answers",
        "  approval_required with an approval_id; once decided, the same call again",
        "  returns the outcome to the model. The approver's side:",
        *approval_curls(
            f"{state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/sales/approvals",
            state.approval_keys.get("sales", ""),
        ),
        "",
        "`crank apply`, `crank keys` and the other client commands use this control plane",
        "and token by default. Press Ctrl-C to stop everything.",
    ]
    return "\n".join(lines)
