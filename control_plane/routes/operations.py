"""`/api/v1/workspaces/{workspace}/operations` routes (being written)."""

from __future__ import annotations

from typing import Any

handlers: list[Any] = []
