"""Signed webhooks: approvers are told (docs/architecture.md, "Webhooks")."""
