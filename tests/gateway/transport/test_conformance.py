"""The official MCP conformance suite against a real gateway, both protocol eras.

``@modelcontextprotocol/conformance`` (pinned in tests/js/package-lock.json)
runs each scenario once, on Node.js 22, through tests/support/auth_proxy.py: the suite
cannot send an Authorization header, so the loopback proxy adds the agent's key
and passes everything else (Host and Origin included) through untouched.

Every check must pass except those listed in
tests/gateway/transport/conformance-expected-failures.yml, which may name only checks that need
the suite's own fixture tools. A WARNING counts as a failure, and a listed
check that passes is a stale entry that fails the test too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from litestar import Litestar

from tests.support.auth_proxy import serve_auth_proxy
from tests.support.gateway import SEED_URL_PATH, Gateway
from tests.support.js import require_node22, run_node, seeded_gateway
from tests.support.paths import JS_DIR

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
SCENARIOS = {
    LEGACY: [
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ],
    MODERN: [
        "server-stateless",
        "tools-list",
        "caching",
        "http-header-validation",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ],
}
EXPECTED_FAILURES = Path(__file__).parent / "conformance-expected-failures.yml"
CONFORMANCE = (
    JS_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
)
NOT_PASSING = ("FAILURE", "WARNING")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class ExpectedFailure:
    spec_version: str
    scenario: str
    check: str
    needs: str
    reason: str


def load_expected_failures() -> list[ExpectedFailure]:
    raw = yaml.safe_load(EXPECTED_FAILURES.read_text())
    assert isinstance(raw, dict)
    assert set(raw) == {"expected_failures"}
    entries = [ExpectedFailure(**item) for item in raw["expected_failures"]]
    for entry in entries:
        assert entry.scenario in SCENARIOS.get(entry.spec_version, []), entry
        assert all(text.strip() for text in (entry.check, entry.needs, entry.reason)), entry
    assert len({(e.spec_version, e.scenario, e.check) for e in entries}) == len(entries)
    return entries


def test_expected_failures_file_is_well_formed() -> None:
    entries = load_expected_failures()
    # Only checks that call the suite's fixture tools, each named with its reason.
    for entry in entries:
        assert entry.needs.startswith("test_") or "tool" in entry.needs, entry


@pytest.fixture(scope="module")
async def proxied(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[str, Gateway]]:
    """The seeded gateway behind the auth proxy; yields the MCP URL on the proxy."""
    require_node22()
    async with (
        seeded_gateway(
            pg_server_url, run_database, app, tmp_path_factory.mktemp("conformance")
        ) as (catalog, gateway),
        serve_auth_proxy(gateway.url, catalog.agent_key) as proxy_url,
    ):
        yield proxy_url + SEED_URL_PATH, gateway


def describe(check: dict[str, Any]) -> str:
    message = check.get("errorMessage") or check.get("description") or ""
    details = json.dumps(check.get("details"))[:600]
    return f"{check['id']} {check['status']}: {message} {details}"


@pytest.mark.parametrize(
    ("spec_version", "scenario"),
    [(version, scenario) for version, scenarios in SCENARIOS.items() for scenario in scenarios],
)
async def test_conformance_scenario(
    proxied: tuple[str, Gateway], tmp_path: Path, spec_version: str, scenario: str
) -> None:
    url, gateway = proxied
    expected = {
        entry.check
        for entry in load_expected_failures()
        if (entry.spec_version, entry.scenario) == (spec_version, scenario)
    }
    # The suite's own baseline check (exit code) as well as ours below.
    baseline = tmp_path / "baseline.yml"
    baseline.write_text(yaml.safe_dump({"server": sorted(f"{scenario}:{c}" for c in expected)}))
    output_dir = tmp_path / "results"
    code, stdout, stderr = await run_node(
        str(CONFORMANCE),
        "server",
        "--url",
        url,
        "--scenario",
        scenario,
        "--spec-version",
        spec_version,
        "--expected-failures",
        str(baseline),
        "--output-dir",
        str(output_dir),
        timeout_s=90,
        env={**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"},
    )
    report = _ANSI.sub("", stdout + stderr)
    files = list(output_dir.glob("*/checks.json"))
    assert len(files) == 1, f"the scenario did not run (skipped at {spec_version}?):\n{report}"
    checks: list[dict[str, Any]] = json.loads(files[0].read_text())

    passed = [c for c in checks if c["status"] == "SUCCESS"]
    not_passing = [c for c in checks if c["status"] in NOT_PASSING]
    unexpected = [c for c in not_passing if c["id"] not in expected]
    stale = sorted(
        check_id
        for check_id in expected
        if (statuses := {c["status"] for c in checks if c["id"] == check_id})
        and statuses <= {"SUCCESS", "INFO"}
    )
    counts = {s: sum(c["status"] == s for c in checks) for s in {c["status"] for c in checks}}
    print(f"conformance {spec_version} {scenario}: {counts}")

    assert passed, f"no check passed:\n{report}"
    assert not unexpected, (
        "checks failed that tests/gateway/transport/conformance-expected-failures.yml does not list:\n"
        + "\n".join(describe(c) for c in unexpected)
        + f"\n\nsuite output:\n{report}\n\ngateway log (tail):\n{gateway.log()[-3000:]}"
    )
    assert not stale, (
        f"these now pass: remove them from tests/gateway/transport/conformance-expected-failures.yml: {stale}"
    )
    assert code == 0, f"the suite exited {code}:\n{report}"
