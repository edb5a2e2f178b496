"""HTTP and JSON-RPC for both MCP protocol eras: checks, auth, sessions, streams."""
