# ruff: noqa: RUF001 - the Russian banner is Cyrillic on purpose
"""What ``crank up`` prints once everything answers: URLs, credentials, curl lines,
in the language of ``CRANK_LANGUAGE`` (English or Russian, the decision notes the
approval curl lines send included).

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
from shared.engine.errors import Language

PROTOCOL_VERSION = "2025-06-18"

# Every sentence the banner prints, per language; the curl lines themselves are the same
# in both but for the note of a decision.
TEXTS: dict[Language, dict[str, str]] = {
    "en": {
        "ready": "Crank is up.",
        "control_plane": "control plane",
        "api_docs": "API docs",
        "console": "web console",
        "gateway": "MCP gateway",
        "inbox": "approver inbox",
        "sales_api": "demo sales API",
        "database": "database",
        "database_embedded": "embedded PostgreSQL 18 in {path}",
        "database_server": "the server in CRANK_DATABASE_URL",
        "credentials": (
            "Local development credentials, printed on purpose (also in {path}, mode 0600):"
        ),
        "admin_token": "admin token",
        "rates_key": "currency-rates agent key",
        "sales_key": "sales agent key",
        "sales_approval_key": "sales approval key",
        "sign_in": "Sign in to the web console as the dev admin (a one-time link, valid 1 hour):",
        "try_it": "Try it:",
        "mcp": "MCP:",
        "approvals": "Human approval (the sales approval key):",
        "approvals_how": (
            "  A tools/call of sales_create_refund with the sales agent key answers\n"
            "  approval_required with an approval_id; once decided, the same call again\n"
            "  returns the outcome to the model. The approver's side:"
        ),
        "approved_note": "The user approved the action",
        "denied_note": "The user denied the action",
        "footer": (
            "`crank apply`, `crank keys` and the other client commands use this control plane\n"
            "and token by default. Press Ctrl-C to stop everything."
        ),
    },
    "ru": {
        "ready": "Crank запущен.",
        "control_plane": "control plane",
        "api_docs": "документация API",
        "console": "веб-консоль",
        "gateway": "MCP-шлюз",
        "inbox": "страница подтверждений",
        "sales_api": "демо API продаж",
        "database": "база данных",
        "database_embedded": "встроенный PostgreSQL 18 в {path}",
        "database_server": "сервер из CRANK_DATABASE_URL",
        "credentials": (
            "Учетные данные локальной разработки, показаны намеренно (они же в {path}, права 0600):"
        ),
        "admin_token": "токен администратора",
        "rates_key": "ключ агента currency-rates",
        "sales_key": "ключ агента sales",
        "sales_approval_key": "ключ подтверждения sales",
        "sign_in": (
            "Вход в веб-консоль как dev-администратор (одноразовая ссылка, действует 1 час):"
        ),
        "try_it": "Попробуйте:",
        "mcp": "MCP:",
        "approvals": "Подтверждение человеком (ключ подтверждения sales):",
        "approvals_how": (
            "  tools/call инструмента sales_create_refund с ключом агента sales отвечает\n"
            "  approval_required с approval_id; после решения тот же вызов\n"
            "  возвращает модели результат. Сторона подтверждающего:"
        ),
        "approved_note": "Пользователь подтвердил действие",
        "denied_note": "Пользователь отклонил действие",
        "footer": (
            "`crank apply`, `crank keys` и другие клиентские команды по умолчанию используют\n"
            "этот control plane и токен. Ctrl-C останавливает всё."
        ),
    },
}
APPROVALS_HEADING = TEXTS["en"]["approvals"]  # where the English banner's approver block starts


def decision_body(approve: bool, language: Language) -> str:
    """The --data of the seed's approve or deny line, its note in ``language``."""
    note = TEXTS[language]["approved_note" if approve else "denied_note"]
    verdict = "yes" if approve else "no"
    return f'{{ "approve": "{verdict}", "note": {json.dumps(note, ensure_ascii=False)} }}'


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


def approval_curls(approvals: str, token: str, language: Language) -> list[str]:
    """The seed's approval lines (mcp-interface.md): list, read, approve, deny."""
    auth = f"-H 'Authorization: Bearer {token}'"
    json_body = "-H 'Content-Type: application/json'"
    one = f"{approvals}/<approval_id>"
    return [
        f"  curl {approvals} \\\n      {auth}",
        f"  curl {one} \\\n      {auth}",
        f"  curl {one}/approve \\\n      {auth} \\\n      {json_body} \\\n"
        f"      --data {shlex.quote(decision_body(True, language))}",
        f"  curl {one}/deny \\\n      {auth} \\\n      {json_body} \\\n"
        f"      --data {shlex.quote(decision_body(False, language))}",
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


def _table(rows: list[tuple[str, str]]) -> list[str]:
    """Labelled lines, the values in one column three spaces after the longest label."""
    width = max(len(label) for label, _ in rows) + 3
    return [f"  {label.ljust(width)}{value}" for label, value in rows]


def render(
    state: DevState,
    *,
    dev_state_file: Path,
    database: Path | None,
    sales_url: str,
    language: Language,
    console_link: str = "",
) -> str:
    """The text ``crank up`` prints when ready; it shows the dev credentials on purpose.
    ``database``: the embedded server's data directory, None for CRANK_DATABASE_URL's."""
    t = TEXTS[language]
    cp = state.control_plane_url
    mcp = f"{state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/currency-rates"
    rates_key = state.agent_keys.get("currency-rates", "")
    where = (
        t["database_server"] if database is None else t["database_embedded"].format(path=database)
    )
    lines = [
        "",
        t["ready"],
        "",
        *_table(
            [
                (t["control_plane"], f"{cp}   ({t['api_docs']}: {cp}/api/v1/schema/docs)"),
                (t["console"], f"{cp}/ui/"),
                (t["gateway"], mcp),
                (
                    t["inbox"],
                    f"{state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/sales/approvals/inbox",
                ),
                (t["sales_api"], sales_url),
                (t["database"], where),
            ]
        ),
        "",
        t["credentials"].format(path=dev_state_file),
        *_table(
            [
                (t["admin_token"], state.admin_token),
                (t["rates_key"], rates_key),
                (t["sales_key"], state.agent_keys.get("sales", "")),
                (t["sales_approval_key"], state.approval_keys.get("sales", "")),
            ]
        ),
        "",
        *([t["sign_in"], f"  {console_link}", ""] if console_link else []),
        t["try_it"],
        f"  curl {cp}/api/v1/workspaces -H 'Authorization: Bearer {state.admin_token}'",
        "",
        t["mcp"],
        *mcp_curls(mcp, rates_key),
        "",
        t["approvals"],
        t["approvals_how"],
        *approval_curls(
            f"{state.gateway_url}/mcp/v1/{DEMO_WORKSPACE}/sales/approvals",
            state.approval_keys.get("sales", ""),
            language,
        ),
        "",
        t["footer"],
    ]
    return "\n".join(lines)
