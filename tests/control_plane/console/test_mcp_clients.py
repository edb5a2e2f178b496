"""The client configurations an agent's page offers: each parses as what its client
reads, names the endpoint, and holds no key (keys are shown once, elsewhere)."""

from __future__ import annotations

import ast
import json

from control_plane.console.mcp_clients import (
    KEY_PLACEHOLDER,
    KEY_VARIABLE,
    approver_snippet,
    client_snippets,
    endpoint,
)

URL = "https://mcp.example.com/mcp/v1/acme/rates"


def test_json_configurations_parse_and_send_the_key_as_a_bearer_header() -> None:
    snippets = {
        s.id: s
        for s in client_snippets(
            endpoint("https://mcp.example.com", "", "acme", "rates"), "acme", "rates"
        )
    }
    desktop = json.loads(snippets["cfg-claude-desktop"].text)["mcpServers"]["crank-acme-rates"]
    assert URL in desktop["args"]
    assert desktop["env"]["AUTH"] == f"Bearer {KEY_PLACEHOLDER}"
    cursor = json.loads(snippets["cfg-cursor"].text)["mcpServers"]["crank-acme-rates"]
    assert cursor == {"url": URL, "headers": {"Authorization": f"Bearer {KEY_PLACEHOLDER}"}}
    vscode = json.loads(snippets["cfg-vscode"].text)
    server = vscode["servers"]["crank-acme-rates"]
    assert server["type"] == "http"
    assert server["url"] == URL
    assert vscode["inputs"][0]["password"] is True


def test_the_python_snippet_is_python_and_without_a_public_url_names_a_host_to_fill_in() -> None:
    [python] = [
        s
        for s in client_snippets(endpoint("", "", "acme", "rates"), "acme", "rates")
        if s.id == "cfg-python"
    ]
    ast.parse(python.text)
    assert f'os.environ["{KEY_VARIABLE}"]' in python.text
    assert 'URL = "https://GATEWAY_HOST/mcp/v1/acme/rates"' in python.text  # a host to fill in


def test_every_snippet_names_the_endpoint_and_the_approver_one_its_approvals() -> None:
    target = endpoint("https://mcp.example.com/", "", "acme", "rates")
    assert target.url == URL
    for snippet in client_snippets(target, "acme", "rates"):
        assert URL in snippet.text, snippet.title
    approver = approver_snippet(target)
    assert f"curl {URL}/approvals" in approver.text
    assert "crk_agent_" not in approver.text  # the approver's side takes an approval key
