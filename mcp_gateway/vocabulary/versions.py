"""The MCP protocol revisions the gateway speaks, by era.

A request whose ``MCP-Protocol-Version`` is not a legacy revision goes to the
modern (2026-07-28, stateless) era; everything else, including no header at
all, is the legacy session protocol (mcp_gateway.transport.endpoint).
"""

from __future__ import annotations

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
BATCH_VERSION = "2025-03-26"  # the only revision with JSON-RPC batches
# Where a 2026-07-28 request's params._meta declares what its client can do.
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
