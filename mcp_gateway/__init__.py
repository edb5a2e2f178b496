"""The MCP data plane: a stateless gateway serving published agents as MCP endpoints."""
