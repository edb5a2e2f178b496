"""A workspace's egress policy: what its operations may call, inside the operator's
global address policy (docs/architecture.md, "Egress per workspace").

Pure decisions, no I/O. The connector in ``shared.engine.outbound`` applies
``EgressPolicy.decide`` to every address it connects to on a workspace's behalf
(redirect hops and reused connections included) and ``allows_host`` to every
URL host before it connects.

Two lists, set by different people:

- ``hosts`` (the workspace owner): ``None`` means any host; otherwise only these
  host names may be called. An entry is a host name (``api.example.com``), a
  wildcard for its subdomains (``*.example.com``, not the name itself) or an IP
  address; no scheme, no port. It narrows, never widens.
- ``grants`` (instance admins): the private destinations the workspace may reach,
  written like ``CRANK_UPSTREAM_ALLOWLIST`` entries. A private address needs both
  the operator's allowlist and a grant; public addresses need no grant. With
  ``CRANK_ALLOW_PRIVATE_UPSTREAMS`` (a development switch) private addresses are
  open to every workspace and grants are not consulted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from shared.engine.ssrf import (
    AddressPolicy,
    AllowEntry,
    Decision,
    IPAddress,
    parse_allowlist,
)

__all__ = [
    "MAX_EGRESS_ENTRIES",
    "Blocked",
    "EgressPolicy",
    "HostPattern",
    "parse_grant",
    "parse_host_pattern",
]

MAX_EGRESS_ENTRIES: Final = 256  # per list; a policy is read on every upstream call
_MAX_HOST_CHARS: Final = 253
# LDH labels; "_" too, which some internal names carry. Names are matched in their
# ASCII (xn--) form, as URLs carry them.
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def _canonical_host(host: str) -> str:
    """A URL host as policies compare it: lower case, no brackets, no final dot,
    an IP address in its compressed form."""
    text = host.strip("[]").rstrip(".").lower()
    try:
        return ipaddress.ip_address(text).compressed
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class HostPattern:
    """A host name, or with ``wildcard`` any name ending in ``.`` + ``name``."""

    name: str
    wildcard: bool = False

    def matches(self, host: str) -> bool:
        """``host`` in its canonical form (``_canonical_host``)."""
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name

    def __str__(self) -> str:
        return f"*.{self.name}" if self.wildcard else self.name


def parse_host_pattern(raw: str) -> HostPattern:
    """One ``hosts`` entry; raises ``ValueError`` saying what is wrong with it."""
    if not raw or len(raw) > _MAX_HOST_CHARS + 2:
        raise ValueError(f"a host name of 1-{_MAX_HOST_CHARS} characters, got {len(raw)}")
    wildcard = raw.startswith("*.")
    text = raw[2:] if wildcard else raw
    if not wildcard:
        try:
            return HostPattern(ipaddress.ip_address(text.strip("[]")).compressed)
        except ValueError:
            pass
    name = text.rstrip(".").lower()
    if not _NAME.fullmatch(name) or len(name) > _MAX_HOST_CHARS:
        raise ValueError(
            f"{raw!r} is not a host name, *.domain or IP address "
            "(no scheme, port, path or other wildcard)"
        )
    return HostPattern(name, wildcard)


def parse_grant(raw: str) -> AllowEntry:
    """One ``grants`` entry (``host:port``, ``ip:port``, ``ip``, ``[ipv6]:port``)."""
    entries = parse_allowlist([raw])  # raises ValueError for a malformed entry
    if len(entries) != 1:
        raise ValueError("an entry host:port, ip:port or ip, got an empty one")
    entry = entries[0]
    if entry.host is not None and parse_host_pattern(entry.host).wildcard:
        raise ValueError(f"{raw!r}: a grant names one host, not a wildcard")
    return entry


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """One workspace's egress: ``hosts`` (``None``: any) and ``grants`` of private destinations."""

    hosts: tuple[HostPattern, ...] | None = None
    grants: tuple[AllowEntry, ...] = ()

    @classmethod
    def parse(cls, hosts: Sequence[str] | None, grants: Sequence[str]) -> EgressPolicy:
        """From stored or submitted text; raises ``ValueError`` on a malformed entry."""
        patterns = None if hosts is None else tuple(parse_host_pattern(h) for h in hosts)
        return cls(patterns, tuple(parse_grant(g) for g in grants))

    def allows_host(self, host: str) -> bool:
        """May a URL with this host be called at all (before any address is judged)?"""
        if self.hosts is None:
            return True
        canonical = _canonical_host(host)
        return any(pattern.matches(canonical) for pattern in self.hosts)

    def decide(
        self, policy: AddressPolicy, ip: IPAddress | str, *, host: str, port: int
    ) -> Decision:
        """The operator's decision (``policy``), narrowed by this workspace's lists."""
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        decision = policy.decide(address, host=host, port=port)
        if not decision.allowed:
            return decision
        if not self.allows_host(host):
            return Decision(False, decision.category, "workspace_hosts")
        if decision.reason == "allowlist" and not any(
            grant.matches(address, host, port) for grant in self.grants
        ):
            return Decision(False, decision.category, "workspace_grants")
        return decision

    @staticmethod
    def refusal(host: str) -> str:
        """The reason a refused call reports: the host name, nothing of the policy."""
        return f"the workspace's egress policy does not allow {_canonical_host(host)}"


BlockedBy = Literal["workspace_hosts", "workspace_grants", "operator", "metadata"]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Which layer refused a call to ``host``:``port``, so that an admin can be told what
    to change (control_plane.services.egress_remedy); never told to the model.

    ``by``: the workspace's host list, its grants, the operator's settings (the
    address needs ``CRANK_UPSTREAM_ALLOWLIST``) or a cloud metadata address (never
    allowed). ``category`` is the address's (``AddressCategory``), "" when the host
    was refused before it was resolved.
    """

    by: BlockedBy
    host: str
    port: int
    category: str = ""

    @classmethod
    def of(cls, decision: Decision, host: str, port: int) -> Blocked:
        """The layer behind a refusing ``decision``."""
        by: BlockedBy = "operator"
        if decision.reason == "metadata":
            by = "metadata"
        elif decision.reason == "workspace_hosts":
            by = "workspace_hosts"
        elif decision.reason == "workspace_grants":
            by = "workspace_grants"
        return cls(by, _canonical_host(host), port, decision.category.value)

    @classmethod
    def not_listed(cls, host: str, port: int) -> Blocked:
        """``host`` is not on the workspace's host list (judged before resolving it)."""
        return cls("workspace_hosts", _canonical_host(host), port)
