"""Cases the gateway fuzzer found, kept as plain tests so they run whatever the
fuzzer draws next (docs/mcp-interface.md, "What is fuzzed")."""

from __future__ import annotations

from tests.gateway.fuzz.fuzzed import Fuzzed
from tests.gateway.fuzz.runs import argument_case


def test_arguments_that_are_not_an_object_are_invalid_even_when_falsy(fuzzed: Fuzzed) -> None:
    # `[]`, `false`, `""` and `0` used to be taken for `{}`, and a tool with no
    # required argument called its upstream.
    for era in ("legacy", "modern"):
        for arguments in ([], False, "", 0, [1], "x"):
            outcome = argument_case(fuzzed.target, "regression", era, "formats", arguments)
            assert outcome == "invalid -> 200 tool invalid_arguments", (era, arguments)
