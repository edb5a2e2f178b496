"""Identity: access tokens from external identity providers (Crank is a resource server).

The gateway checks its callers' tokens with it (docs/architecture.md, "Identity").
"""
