"""The control plane: admin REST API, its OpenAPI document, the CLI and (later) the web UI."""
