"""The approval-key endpoints under fuzzed requests: list, get, approve and deny with
real and made-up ids, query strings, decision bodies, keys, Content-Types and
Origins (CORS). Every answer is a documented status with ``{"code", "message"}``
on refusals; an allowed Origin gets its CORS headers on every answer and a
foreign one a 403 (tests.gateway.fuzz.oracles.check_approvals). Approved calls
then run through the worker against the loopback upstream."""

from __future__ import annotations

import pytest

from tests.gateway.fuzz.fuzzed import Fuzzed, ci_settings
from tests.gateway.fuzz.runs import fuzz_approvals, pending_approvals

EXAMPLES = 300


@pytest.mark.timeout(600)
def test_fuzzed_requests_to_the_approval_endpoints_get_documented_answers(
    fuzzed: Fuzzed,
) -> None:
    known = pending_approvals(fuzzed.target, 8)
    fuzz_approvals(fuzzed.target, known, ci_settings(EXAMPLES))
    fuzzed.report()
    outcomes = fuzzed.target.outcomes
    assert sum(outcomes.values()) >= EXAMPLES
    assert outcomes["approvals: 200"] > 0
    assert outcomes["approvals: 409 not_pending"] > 0  # real approvals were decided
