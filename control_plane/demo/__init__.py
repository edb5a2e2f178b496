"""The demo seed (``demo.yaml``) and the demo sales API it calls (``sales_api``)."""

from __future__ import annotations

import os
from importlib import resources

import msgspec
import yaml

from shared.engine.spec import CrankFile
from shared.settings import SettingsError

DEMO_WORKSPACE = "default"
DEFAULT_SALES_PORT = 8090
_PORT_PLACEHOLDER = "${CRANK_DEMO_SALES_PORT}"


def demo_sales_port() -> int:
    """``CRANK_DEMO_SALES_PORT``: where ``crank up`` runs the demo sales API."""
    raw = os.environ.get("CRANK_DEMO_SALES_PORT", "")
    if not raw:
        return DEFAULT_SALES_PORT
    try:
        port = int(raw)
    except ValueError:
        raise SettingsError(f"CRANK_DEMO_SALES_PORT must be an integer, got {raw!r}") from None
    if not 1 <= port <= 65535:
        raise SettingsError(f"CRANK_DEMO_SALES_PORT must be a TCP port, got {port}")
    return port


def demo_file_text(sales_port: int) -> str:
    text = resources.files("control_plane.demo").joinpath("demo.yaml").read_text(encoding="utf-8")
    return text.replace(_PORT_PLACEHOLDER, str(sales_port))


def load_demo_file(sales_port: int | None = None) -> CrankFile:
    """The demo seed; its operations call the demo sales API on ``sales_port``."""
    port = demo_sales_port() if sales_port is None else sales_port
    return msgspec.convert(yaml.safe_load(demo_file_text(port)), CrankFile)
