"""The rules about an agent's catalog: how many tools, and how alike they are.

``operations`` maps a bound name to the spec the catalog will serve; a bound
name missing from it is counted but not compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from difflib import SequenceMatcher
from itertools import combinations
from typing import Final

from control_plane.lint.findings import (
    MAX_TOOLS_ACCEPTED,
    MAX_TOOLS_ADVISED,
    Finding,
    agent_resource,
    finding,
)
from control_plane.lint.operation_rules import name_tokens
from control_plane.lint.text import words
from shared.engine.spec import AgentSpec, OperationSpec

NAME_RATIO: Final = 0.9  # difflib ratio of two names above which they read as one
DESCRIPTION_OVERLAP: Final = 0.8  # Jaccard overlap of two descriptions' word sets
_MIN_DESCRIPTION_WORDS: Final = 5


def _singular(token: str) -> str:
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


def _name_key(name: str) -> list[str]:
    """The words of a name, singular, without versions: get_orders_v2 -> [get, order]."""
    return [_singular(t) for t in name_tokens(name) if len(t) > 1 and not t.isdigit()]


class _Name:
    """A tool name with what the similarity test needs, computed once per name."""

    __slots__ = ("chars", "counts", "key", "lower")

    def __init__(self, name: str) -> None:
        self.key = _name_key(name)
        self.lower = name.lower()
        self.counts = Counter(self.lower)
        self.chars = frozenset(self.counts)

    def unmatched(self, other: _Name) -> int:
        """Characters of this name that cannot match ``other``'s (their kind is absent)."""
        return sum(self.counts[char] for char in self.chars - other.chars)


def _similar_names(a: _Name, b: _Name) -> bool:
    if a.key == b.key:
        return True
    # difflib's ratio is 2*M/T; its cheap upper bounds (the shorter length, then
    # the common characters) settle most pairs first, so an agent of 100 tools
    # (4,950 pairs) costs milliseconds. Same answers as ratio() alone.
    total = len(a.lower) + len(b.lower)
    if 2 * min(len(a.lower), len(b.lower)) < NAME_RATIO * total:
        return False
    if 2 * (total - a.unmatched(b) - b.unmatched(a)) < 2 * NAME_RATIO * total:
        return False  # quick bound: characters whose kind the other lacks never match
    common = sum(min(count, b.counts[char]) for char, count in a.counts.items())
    if 2 * common < NAME_RATIO * total:
        return False
    return SequenceMatcher(None, a.lower, b.lower, autojunk=False).ratio() >= NAME_RATIO


def _similar_descriptions(a: set[str], b: set[str]) -> bool:
    if min(len(a), len(b)) < _MIN_DESCRIPTION_WORDS:
        return a == b
    return len(a & b) / len(a | b) >= DESCRIPTION_OVERLAP


def _check_similar(
    agent: AgentSpec, operations: Mapping[str, OperationSpec], resource: str
) -> Iterator[Finding]:
    bound = [(index, name) for index, name in enumerate(agent.operations) if name in operations]
    names = {name: _Name(name) for _, name in bound}
    described = {name: set(words(operations[name].description)) for _, name in bound}
    flagged: set[int] = set()  # each tool is reported once, with the first it resembles
    for (_, first), (index, second) in combinations(bound, 2):
        if index in flagged:
            continue
        field = f"operations[{index}]"
        if _similar_names(names[first], names[second]):
            yield finding(
                "agent-similar-tools",
                resource,
                field,
                f"tools {first!r} and {second!r} have near-identical names; "
                "the model easily picks the wrong one",
            )
            flagged.add(index)
        elif _similar_descriptions(described[first], described[second]):
            yield finding(
                "agent-similar-tools",
                resource,
                field,
                f"tools {first!r} and {second!r} have near-identical descriptions; "
                "the model cannot tell when to use which",
            )
            flagged.add(index)


def lint_agent(agent: AgentSpec, operations: Mapping[str, OperationSpec]) -> list[Finding]:
    """Every finding about an agent; ``operations`` holds the specs of its bound tools."""
    resource = agent_resource(agent.slug)
    count = len(agent.operations)
    findings: list[Finding] = []
    if count > MAX_TOOLS_ACCEPTED:
        findings.append(
            finding(
                "agent-tool-limit",
                resource,
                "operations",
                f"{count} tools: some LLM APIs refuse more than {MAX_TOOLS_ACCEPTED} tools",
            )
        )
        return findings  # comparing every pair of so many tools would take long
    if count > MAX_TOOLS_ADVISED:
        findings.append(
            finding(
                "agent-too-many-tools",
                resource,
                "operations",
                f"{count} tools: with more than {MAX_TOOLS_ADVISED} the model picks the "
                "wrong one more often",
            )
        )
    findings += _check_similar(agent, operations, resource)
    return findings
