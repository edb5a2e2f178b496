"""Human approval: pending rows, the approval-key endpoints and the worker."""

from __future__ import annotations

from mcp_gateway.approvals.requests import request_approval

__all__ = ["request_approval"]
