"""`/api/v1/workspaces/{workspace}/audit` routes (being written)."""

from __future__ import annotations

from typing import Any

handlers: list[Any] = []
