"""The MCP endpoint under fuzzed requests in both protocol eras: raw bytes, JSON,
JSON-RPC messages and batches, odd headers and HTTP methods. Every answer is a
documented status with a well-formed body (tests.gateway.fuzz.oracles), and the
process keeps serving within its memory bound."""

from __future__ import annotations

import pytest

from tests.gateway.fuzz.fuzzed import Fuzzed, ci_settings
from tests.gateway.fuzz.runs import fuzz_mcp

EXAMPLES = 300


@pytest.mark.timeout(600)
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_fuzzed_requests_to_the_mcp_endpoint_get_documented_answers(
    fuzzed: Fuzzed, era: str
) -> None:
    fuzz_mcp(fuzzed.target, era, ci_settings(EXAMPLES))
    fuzzed.report()
    outcomes = fuzzed.target.outcomes
    assert sum(outcomes.values()) >= EXAMPLES
    assert outcomes[f"{era}: 200 tool ok"] > 0  # the fuzzer reaches tools/call
