"""Switching tracing on (shared.tracing.configure): the switch, the standard OTEL_*
variables Crank reads itself, and the base install without the 'otel' extra."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from shared import tracing
from tests.support.paths import REPOSITORY_DIR


@pytest.fixture(autouse=True)
def tracing_reset(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    yield
    tracing.shutdown()


def test_tracing_stays_off_unless_switched_on() -> None:
    assert tracing.configure(on=False, service_name="crank-gateway") is False
    assert tracing.enabled is False


def test_switched_on_tracing_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.configure(on=True, service_name="crank-gateway") is True
    assert tracing.enabled is True
    tracing.shutdown()
    assert tracing.enabled is False


def test_otel_sdk_disabled_keeps_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.configure(on=True, service_name="crank-gateway") is False
    assert tracing.enabled is False


def test_switched_on_without_the_sdk_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(tracing.TracingUnavailable):
        tracing.configure(on=True, service_name="crank-gateway")
    assert tracing.enabled is False


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
    ],
)
def test_an_exporter_crank_cannot_run_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(tracing.TracingUnavailable):
        tracing.configure(on=True, service_name="crank-gateway")
    assert tracing.enabled is False


def test_the_gateway_imports_no_opentelemetry_while_tracing_is_off() -> None:
    """The runtime image may lack the 'otel' extra: nothing imports it until switched on."""
    code = (
        "import sys\n"
        "import mcp_gateway.app\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPOSITORY_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
