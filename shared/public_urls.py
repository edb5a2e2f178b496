"""Where clients reach the gateway, as both processes name it: the gateway in its
approval URLs and webhooks, the console on an agent's page
(``CRANK_PUBLIC_URL``, ``CRANK_PUBLIC_PATH_PREFIX``; docs/settings.md)."""

from __future__ import annotations


def path_prefix(configured: str) -> str:
    """``CRANK_PUBLIC_PATH_PREFIX`` as a path prefix: ``mcp/`` → ``/mcp``, empty stays empty."""
    prefix = configured.strip().strip("/")
    return f"/{prefix}" if prefix else ""


def mcp_endpoint_path(prefix: str, workspace: str, agent: str) -> str:
    """An agent's MCP endpoint path: ``/mcp/v1/...`` as the gateway serves it, or
    ``{prefix}/v1/...`` when a proxy publishes the gateway under ``prefix``."""
    return f"{path_prefix(prefix) or '/mcp'}/v1/{workspace}/{agent}"


def approvals_path(prefix: str, workspace: str, agent: str) -> str:
    """The server path of an agent's approvals (``/v1/{workspace}/{agent}/approvals``)
    behind ``prefix``: the records below it, the approver inbox at ``.../inbox``."""
    return f"{path_prefix(prefix)}/v1/{workspace}/{agent}/approvals"
