"""The process's Prometheus registry, and the metrics code in ``shared`` counts.

The gateway serves this registry on its metrics port (mcp_gateway.upkeep.metrics
adds its own metrics to it); the control plane counts into it too, though it
serves no metrics endpoint.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

REGISTRY = CollectorRegistry()

# Label values stay bounded: ``task`` is one of the fixed names the code gives
# its background loops (shared.periodic).
BACKGROUND_FAILURES = Counter(
    "crank_background_failures_total",
    "Failed runs of a background loop, by task; the loop carries on after each.",
    ["task"],
    registry=REGISTRY,
)
