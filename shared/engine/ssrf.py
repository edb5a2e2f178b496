"""The outbound address policy: may Crank connect to this IP (after DNS resolution)?

Pure decisions, no I/O. The connector in ``shared.engine.outbound`` applies it to every
address a host name resolves to, and to IP literals, right before connecting.

Order of the decision (``AddressPolicy.decide``):

1. Unwrap IPv6 forms that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
   IPv4-compatible ``::a.b.c.d``, 6to4 ``2002:AABB:CCDD::/48``, NAT64
   ``64:ff9b::/96``); the embedded IPv4 address is what gets judged.
2. Cloud metadata addresses are refused always, whatever the flag or allowlist.
3. Public addresses are allowed.
4. Everything else (loopback, RFC 1918, link-local, CGNAT, unique-local,
   unspecified, multicast, documentation, reserved, IPv6 outside 2000::/3) is
   allowed only with ``CRANK_ALLOW_PRIVATE_UPSTREAMS``, an allowlist entry
   matching the destination, or, for loopback alone,
   ``CRANK_ALLOW_LOOPBACK_UPSTREAMS`` (which ``crank up`` sets when it serves on
   loopback: docs/architecture.md, "Egress per workspace").

Allowlist entries (``CRANK_UPSTREAM_ALLOWLIST``): ``host:port`` (the URL's host
name, case-insensitive, on that port), ``ip:port`` and ``ip`` (any port); an
IPv6 address with a port is written ``[::1]:8080``.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

__all__ = [
    "AddressCategory",
    "AddressPolicy",
    "AllowEntry",
    "Decision",
    "IPAddress",
    "classify",
    "parse_allowlist",
    "unwrap",
]


class AddressCategory(enum.Enum):
    PUBLIC = "public"
    METADATA = "metadata"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link_local"
    SHARED = "shared"  # CGNAT 100.64.0.0/10
    UNIQUE_LOCAL = "unique_local"
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"
    RESERVED = "reserved"


_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Always refused. Whole /24s for the AWS link-local services (IMDS, DNS, NTP,
# ECS task and EKS pod identity endpoints); single addresses for the rest.
_METADATA: tuple[_V4 | _V6, ...] = (
    _V4("169.254.169.0/24"),  # AWS/GCP/Azure/OpenStack/DigitalOcean/Oracle/Hetzner IMDS
    _V4("169.254.170.0/24"),  # AWS ECS task metadata (.2), EKS pod identity (.23)
    _V4("169.254.0.23/32"),  # Tencent Cloud
    _V4("100.100.100.200/32"),  # Alibaba Cloud
    _V4("168.63.129.16/32"),  # Azure WireServer (public address, host-only service)
    _V4("192.0.0.192/32"),  # Oracle Cloud
    _V6("fd00:ec2::254/128"),  # AWS IMDS over IPv6
    _V6("fd00:ec2::23/128"),  # AWS EKS pod identity over IPv6
)

_V4_TABLE: tuple[tuple[_V4, AddressCategory], ...] = (
    (_V4("0.0.0.0/8"), AddressCategory.UNSPECIFIED),
    (_V4("10.0.0.0/8"), AddressCategory.PRIVATE),
    (_V4("100.64.0.0/10"), AddressCategory.SHARED),
    (_V4("127.0.0.0/8"), AddressCategory.LOOPBACK),
    (_V4("169.254.0.0/16"), AddressCategory.LINK_LOCAL),
    (_V4("172.16.0.0/12"), AddressCategory.PRIVATE),
    (_V4("192.0.0.0/24"), AddressCategory.RESERVED),  # IETF protocol assignments
    (_V4("192.0.2.0/24"), AddressCategory.RESERVED),  # TEST-NET-1
    (_V4("192.88.99.0/24"), AddressCategory.RESERVED),  # 6to4 relay anycast
    (_V4("192.168.0.0/16"), AddressCategory.PRIVATE),
    (_V4("198.18.0.0/15"), AddressCategory.RESERVED),  # benchmarking
    (_V4("198.51.100.0/24"), AddressCategory.RESERVED),  # TEST-NET-2
    (_V4("203.0.113.0/24"), AddressCategory.RESERVED),  # TEST-NET-3
    (_V4("224.0.0.0/4"), AddressCategory.MULTICAST),
    (_V4("240.0.0.0/4"), AddressCategory.RESERVED),  # incl. 255.255.255.255
)

_GLOBAL_UNICAST_V6 = _V6("2000::/3")
_V6_TABLE: tuple[tuple[_V6, AddressCategory], ...] = (
    (_V6("::/128"), AddressCategory.UNSPECIFIED),
    (_V6("::1/128"), AddressCategory.LOOPBACK),
    (_V6("64:ff9b:1::/48"), AddressCategory.PRIVATE),  # local-use NAT64 (RFC 8215)
    (_V6("fc00::/7"), AddressCategory.UNIQUE_LOCAL),
    (_V6("fe80::/10"), AddressCategory.LINK_LOCAL),
    (_V6("fec0::/10"), AddressCategory.PRIVATE),  # deprecated site-local
    (_V6("ff00::/8"), AddressCategory.MULTICAST),
    (_V6("2001::/23"), AddressCategory.RESERVED),  # IETF assignments, Teredo, ORCHID
    (_V6("2001:db8::/32"), AddressCategory.RESERVED),  # documentation
    (_V6("3fff::/20"), AddressCategory.RESERVED),  # documentation (RFC 9637)
)

_MAPPED = _V6("::ffff:0:0/96")
_COMPATIBLE = _V6("::/96")
_NAT64 = _V6("64:ff9b::/96")
_SIX_TO_FOUR = _V6("2002::/16")


def unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64), else ``ip``."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip in _MAPPED or ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(ip) >> 80) & 0xFFFFFFFF)
    return ip


def classify(ip: IPAddress) -> AddressCategory:
    """The category of ``ip`` after unwrapping embedded IPv4 addresses."""
    ip = unwrap(ip)
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        ip = ipaddress.IPv6Address(ip.compressed.split("%", 1)[0])
    for net in _METADATA:
        if ip.version == net.version and ip in net:
            return AddressCategory.METADATA
    if isinstance(ip, ipaddress.IPv4Address):
        for net4, category in _V4_TABLE:
            if ip in net4:
                return category
        return AddressCategory.PUBLIC
    for net6, category in _V6_TABLE:
        if ip in net6:
            return category
    if ip not in _GLOBAL_UNICAST_V6:
        return AddressCategory.RESERVED
    return AddressCategory.PUBLIC


@dataclass(frozen=True, slots=True)
class AllowEntry:
    """One allowlist entry: a host name or an address, on one port or any (``None``)."""

    host: str | None = None
    ip: IPAddress | None = None
    port: int | None = None

    def matches(self, ip: IPAddress, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.ip is not None:
            return unwrap(self.ip) == unwrap(ip)
        return self.host is not None and self.host == _norm_host(host)


def _norm_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _parse_entry(raw: str) -> AllowEntry:
    text = raw.strip()
    try:
        return AllowEntry(ip=ipaddress.ip_address(text))  # "ip" (IPv4 or bare IPv6)
    except ValueError:
        pass
    if text.startswith("["):
        addr, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"upstream allowlist entry {raw!r}: write [ipv6]:port")
        return AllowEntry(ip=ipaddress.ip_address(addr), port=_port(raw, port_text))
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"upstream allowlist entry {raw!r}: expected host:port, ip:port or ip")
    port = _port(raw, port_text)
    try:
        return AllowEntry(ip=ipaddress.IPv4Address(host), port=port)
    except ValueError:
        return AllowEntry(host=_norm_host(host), port=port)


def _port(raw: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"upstream allowlist entry {raw!r}: bad port {text!r}")
    return int(text)


def parse_allowlist(entries: tuple[str, ...] | list[str]) -> tuple[AllowEntry, ...]:
    """Parse ``CRANK_UPSTREAM_ALLOWLIST`` entries; raises ``ValueError`` on a malformed one."""
    return tuple(_parse_entry(e) for e in entries if e.strip())


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    category: AddressCategory
    # "public", "allow_private", "allow_loopback", "allowlist", "metadata",
    # "private_address"; a
    # workspace's policy (shared.engine.egress) adds "workspace_hosts", "workspace_grants".
    reason: str

    @property
    def by_workspace(self) -> bool:
        """Refused by a workspace's egress policy, not by the operator's."""
        return self.reason.startswith("workspace_")


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """``allow_private`` is ``CRANK_ALLOW_PRIVATE_UPSTREAMS``; ``allowlist`` the parsed
    entries; ``allow_loopback`` is ``CRANK_ALLOW_LOOPBACK_UPSTREAMS``."""

    allow_private: bool = False
    allowlist: tuple[AllowEntry, ...] = ()
    allow_loopback: bool = False

    @classmethod
    def from_settings(
        cls,
        *,
        allow_private_upstreams: bool,
        upstream_allowlist: tuple[str, ...],
        allow_loopback_upstreams: bool = False,
    ) -> AddressPolicy:
        return cls(
            allow_private_upstreams, parse_allowlist(upstream_allowlist), allow_loopback_upstreams
        )

    def decide(self, ip: IPAddress | str, *, host: str, port: int) -> Decision:
        """May Crank connect to ``ip`` on ``port``, reached via the URL host ``host``?"""
        address = ipaddress.ip_address(ip) if isinstance(ip, str) else ip
        category = classify(address)
        if category is AddressCategory.METADATA:
            return Decision(False, category, "metadata")
        if category is AddressCategory.PUBLIC:
            return Decision(True, category, "public")
        if self.allow_private:
            return Decision(True, category, "allow_private")
        # The machine's own services, for a local run only; like allow_private, every
        # workspace may reach them without a grant (a workspace's host list still narrows).
        if self.allow_loopback and category is AddressCategory.LOOPBACK:
            return Decision(True, category, "allow_loopback")
        if any(entry.matches(address, host, port) for entry in self.allowlist):
            return Decision(True, category, "allowlist")
        return Decision(False, category, "private_address")
