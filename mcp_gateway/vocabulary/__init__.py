"""The bottom of the gateway: the JSON-RPC codec, protocol revisions and tool
definitions, which every layer above may use and which import nothing of the
gateway (docs/architecture.md, "Layers of the gateway")."""
