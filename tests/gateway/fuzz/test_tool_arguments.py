"""tools/call arguments fuzzed against every schema keyword the operation compiler
evaluates (tests.gateway.fuzz.catalog), in both protocol eras, through a real
gateway and a loopback upstream: arguments drawn from the schema succeed and
reach the upstream as sent; arguments one mutation away from valid that the
schema refuses are ``invalid_arguments`` naming a field, with nothing sent
(tests.gateway.fuzz.runs.argument_case)."""

from __future__ import annotations

import pytest

from tests.gateway.fuzz.catalog import TOOLS
from tests.gateway.fuzz.fuzzed import Fuzzed, ci_settings
from tests.gateway.fuzz.runs import fuzz_arguments

EXAMPLES = 30 * len(TOOLS)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_fuzzed_arguments_succeed_when_the_schema_accepts_them_and_name_a_field_when_not(
    fuzzed: Fuzzed, era: str
) -> None:
    fuzz_arguments(fuzzed.target, era, ci_settings(EXAMPLES))
    fuzzed.report()
    outcomes = fuzzed.target.outcomes
    assert outcomes[f"{era} arguments: valid -> 200 tool ok"] >= len(TOOLS)
    assert outcomes[f"{era} arguments: invalid -> 200 tool invalid_arguments"] >= len(TOOLS)
