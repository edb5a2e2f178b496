"""Identity: access tokens from external identity providers (Crank is a resource server).

Not yet wired into the gateway or the control plane (docs/architecture.md,
"Identity (in progress)").
"""
