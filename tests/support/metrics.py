"""Reading the process's Prometheus registry in tests."""

from __future__ import annotations

from shared.metrics import REGISTRY


def background_failures(task: str) -> float:
    """``crank_background_failures_total`` of one background loop (shared.periodic)."""
    return REGISTRY.get_sample_value("crank_background_failures_total", {"task": task}) or 0.0
