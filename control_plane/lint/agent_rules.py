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

    __slots__ = ("counts", "key", "lower", "mask", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.key = _name_key(name)
        self.lower = name.lower()
        self.counts = Counter(self.lower)
        self.mask = 0  # one bit per kind of character (tool names are ASCII)
        for char in self.counts:
            self.mask |= 1 << ord(char)


def _similar_names(a: _Name, b: _Name) -> bool:
    if a.key == b.key:
        return True
    # difflib's ratio is 2*M/T; its cheap upper bounds settle most pairs first, so
    # an agent of 100 tools (4,950 pairs) costs milliseconds. Same answers as ratio().
    total = len(a.lower) + len(b.lower)
    if not _could_reach(min(len(a.lower), len(b.lower)), total):
        return False  # the shorter length (difflib's real_quick_ratio)
    if not _could_reach((total - (a.mask ^ b.mask).bit_count()) / 2, total):
        return False  # a kind of character the other lacks matches nothing
    if not _could_reach(sum(min(n, b.counts[char]) for char, n in a.counts.items()), total):
        return False  # the common characters (difflib's quick_ratio)
    return SequenceMatcher(None, a.lower, b.lower, autojunk=False).ratio() >= NAME_RATIO


def _could_reach(matches: float, total: int) -> bool:
    """difflib's ratio formula on an upper bound of the matches: False settles the pair."""
    return 2.0 * matches / total >= NAME_RATIO


class _Words:
    """A description's word set as bits over the agent's vocabulary: set algebra on ints."""

    __slots__ = ("mask", "size")

    def __init__(self, description: str, vocabulary: dict[str, int]) -> None:
        found = set(words(description))
        self.size = len(found)
        self.mask = 0
        for word in found:
            self.mask |= 1 << vocabulary.setdefault(word, len(vocabulary))


def _similar_descriptions(a: _Words, b: _Words) -> bool:
    if min(a.size, b.size) < _MIN_DESCRIPTION_WORDS:
        return a.mask == b.mask  # the same set
    common = (a.mask & b.mask).bit_count()
    return common / (a.size + b.size - common) >= DESCRIPTION_OVERLAP  # |a & b| / |a | b|


def _check_similar(
    agent: AgentSpec, operations: Mapping[str, OperationSpec], resource: str
) -> Iterator[Finding]:
    vocabulary: dict[str, int] = {}
    bound = [
        (index, _Name(name), _Words(operations[name].description, vocabulary))
        for index, name in enumerate(agent.operations)
        if name in operations
    ]
    flagged: set[int] = set()  # each tool is reported once, with the first it resembles
    for (_, first, first_words), (index, second, second_words) in combinations(bound, 2):
        if index in flagged:
            continue
        if _similar_names(first, second):
            yield finding(
                "agent-similar-tools",
                resource,
                f"operations[{index}]",
                f"tools {first.name!r} and {second.name!r} have near-identical names; "
                "the model easily picks the wrong one",
            )
            flagged.add(index)
        elif _similar_descriptions(first_words, second_words):
            yield finding(
                "agent-similar-tools",
                resource,
                f"operations[{index}]",
                f"tools {first.name!r} and {second.name!r} have near-identical descriptions; "
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
