"""The address policy, decided on addresses alone: no packets are sent here."""

from __future__ import annotations

import ipaddress

import pytest

from shared.engine.ssrf import (
    AddressCategory,
    AddressPolicy,
    AllowEntry,
    classify,
    parse_allowlist,
    unwrap,
)

C = AddressCategory

CATEGORIES = [
    # public
    ("93.184.216.34", C.PUBLIC),
    ("8.8.8.8", C.PUBLIC),
    ("1.1.1.1", C.PUBLIC),
    ("2606:4700:4700::1111", C.PUBLIC),
    ("2a00:1450:4001::200e", C.PUBLIC),
    ("100.63.255.255", C.PUBLIC),  # just below CGNAT
    ("100.128.0.0", C.PUBLIC),  # just above CGNAT
    ("172.15.255.255", C.PUBLIC),
    ("172.32.0.0", C.PUBLIC),
    ("11.0.0.1", C.PUBLIC),
    # loopback
    ("127.0.0.1", C.LOOPBACK),
    ("127.255.255.254", C.LOOPBACK),
    ("::1", C.LOOPBACK),
    # RFC 1918
    ("10.0.0.5", C.PRIVATE),
    ("10.255.255.255", C.PRIVATE),
    ("172.16.0.1", C.PRIVATE),
    ("172.31.255.255", C.PRIVATE),
    ("192.168.1.1", C.PRIVATE),
    # link-local
    ("169.254.1.1", C.LINK_LOCAL),
    ("fe80::1", C.LINK_LOCAL),
    ("fe80::1%1", C.LINK_LOCAL),
    ("febf::1", C.LINK_LOCAL),
    # CGNAT
    ("100.64.0.1", C.SHARED),
    ("100.127.255.255", C.SHARED),
    # unique local
    ("fc00::1", C.UNIQUE_LOCAL),
    ("fd12:3456:789a::1", C.UNIQUE_LOCAL),
    # unspecified
    ("0.0.0.0", C.UNSPECIFIED),  # noqa: S104 - an address to judge, not to bind
    ("0.1.2.3", C.UNSPECIFIED),
    ("::", C.UNSPECIFIED),
    # multicast
    ("224.0.0.1", C.MULTICAST),
    ("239.255.255.250", C.MULTICAST),
    ("ff02::1", C.MULTICAST),
    ("ff0e::1", C.MULTICAST),
    # reserved, documentation, benchmarking
    ("240.0.0.1", C.RESERVED),
    ("255.255.255.255", C.RESERVED),
    ("192.0.2.1", C.RESERVED),
    ("198.51.100.7", C.RESERVED),
    ("203.0.113.9", C.RESERVED),
    ("198.18.0.1", C.RESERVED),
    ("192.0.0.8", C.RESERVED),
    ("192.88.99.1", C.RESERVED),
    ("2001:db8::1", C.RESERVED),
    ("2001::1", C.RESERVED),  # Teredo
    ("3fff::1", C.RESERVED),
    ("100::1", C.RESERVED),  # discard-only
    ("4000::1", C.RESERVED),  # outside 2000::/3
    ("fec0::1", C.PRIVATE),  # deprecated site-local
    ("64:ff9b:1::a00:5", C.PRIVATE),  # local-use NAT64
    # metadata
    ("169.254.169.254", C.METADATA),
    ("169.254.169.253", C.METADATA),
    ("169.254.170.2", C.METADATA),
    ("169.254.170.23", C.METADATA),
    ("169.254.0.23", C.METADATA),
    ("100.100.100.200", C.METADATA),
    ("168.63.129.16", C.METADATA),
    ("192.0.0.192", C.METADATA),
    ("fd00:ec2::254", C.METADATA),
    ("fd00:ec2::23", C.METADATA),
    # IPv4 carried in IPv6: judged by the IPv4 address
    ("::ffff:127.0.0.1", C.LOOPBACK),
    ("::ffff:10.0.0.5", C.PRIVATE),
    ("::ffff:169.254.169.254", C.METADATA),
    ("::ffff:8.8.8.8", C.PUBLIC),
    ("::127.0.0.1", C.LOOPBACK),  # IPv4-compatible
    ("::a00:5", C.PRIVATE),
    ("::a9fe:a9fe", C.METADATA),
    ("2002:7f00:1::", C.LOOPBACK),  # 6to4 of 127.0.0.1
    ("2002:a9fe:a9fe::1", C.METADATA),
    ("2002:c0a8:101::1", C.PRIVATE),
    ("2002:808:808::1", C.PUBLIC),
    ("64:ff9b::7f00:1", C.LOOPBACK),  # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:a9fe", C.METADATA),
    ("64:ff9b::6464:64c8", C.METADATA),  # 100.100.100.200
    ("64:ff9b::808:808", C.PUBLIC),
]


@pytest.mark.parametrize(("address", "category"), CATEGORIES)
def test_every_address_falls_in_its_category(address: str, category: AddressCategory) -> None:
    assert classify(ipaddress.ip_address(address)) is category


def test_unwrap_returns_the_embedded_ipv4_address() -> None:
    assert unwrap(ipaddress.ip_address("::ffff:1.2.3.4")) == ipaddress.IPv4Address("1.2.3.4")
    assert unwrap(ipaddress.ip_address("2002:102:304::")) == ipaddress.IPv4Address("1.2.3.4")
    assert unwrap(ipaddress.ip_address("64:ff9b::102:304")) == ipaddress.IPv4Address("1.2.3.4")
    assert unwrap(ipaddress.ip_address("::1")) == ipaddress.IPv6Address("::1")
    assert unwrap(ipaddress.ip_address("2606:4700::1")) == ipaddress.IPv6Address("2606:4700::1")


NON_PUBLIC = [a for a, c in CATEGORIES if c not in (C.PUBLIC, C.METADATA)]
METADATA = [a for a, c in CATEGORIES if c is C.METADATA]
PUBLIC = [a for a, c in CATEGORIES if c is C.PUBLIC]


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_non_public_addresses_are_refused_by_default(address: str) -> None:
    decision = AddressPolicy().decide(address, host="api.example", port=443)
    assert (decision.allowed, decision.reason) == (False, "private_address")


@pytest.mark.parametrize("address", NON_PUBLIC)
def test_non_public_addresses_are_allowed_with_the_flag(address: str) -> None:
    decision = AddressPolicy(allow_private=True).decide(address, host="api.example", port=443)
    assert (decision.allowed, decision.reason) == (True, "allow_private")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed_without_the_flag(address: str) -> None:
    assert AddressPolicy().decide(address, host="api.example", port=443).allowed


@pytest.mark.parametrize("address", METADATA)
def test_metadata_addresses_are_refused_whatever_the_flag_or_allowlist(address: str) -> None:
    policy = AddressPolicy(
        allow_private=True,
        allowlist=parse_allowlist(
            [address if ":" not in address else f"[{address}]:80", f"{address}", "meta.test:80"]
        ),
    )
    decision = policy.decide(address, host="meta.test", port=80)
    assert (decision.allowed, decision.reason) == (False, "metadata")


ALLOWLIST = ("127.0.0.1:8090", "10.0.0.5", "internal.test:8443", "[::1]:9000", "fd00::7")

ALLOWLIST_CASES = [
    # (address, host, port, allowed)
    ("127.0.0.1", "127.0.0.1", 8090, True),
    ("127.0.0.1", "127.0.0.1", 8091, False),  # other port
    ("127.0.0.2", "127.0.0.2", 8090, False),  # other address
    ("::ffff:127.0.0.1", "localhost", 8090, True),  # same address, mapped
    ("10.0.0.5", "10.0.0.5", 1, True),  # "ip": any port
    ("10.0.0.5", "whatever.test", 65535, True),
    ("10.0.0.6", "10.0.0.6", 80, False),
    ("10.9.9.9", "internal.test", 8443, True),  # "host:port": whatever it resolves to
    ("10.9.9.9", "INTERNAL.test.", 8443, True),  # case and trailing dot
    ("10.9.9.9", "internal.test", 443, False),
    ("10.9.9.9", "evil.internal.test", 8443, False),
    ("::1", "::1", 9000, True),
    ("::1", "::1", 9001, False),
    ("fd00::7", "fd00::7", 1234, True),
    ("fd00::8", "fd00::8", 1234, False),
    ("169.254.169.254", "internal.test", 8443, False),  # metadata never
]


@pytest.mark.parametrize(("address", "host", "port", "allowed"), ALLOWLIST_CASES)
def test_allowlist_allows_exactly_its_private_destinations(
    address: str, host: str, port: int, allowed: bool
) -> None:
    policy = AddressPolicy(allowlist=parse_allowlist(ALLOWLIST))
    decision = policy.decide(address, host=host, port=port)
    assert decision.allowed is allowed
    if allowed:
        assert decision.reason == "allowlist"


@pytest.mark.parametrize(
    ("entry", "parsed"),
    [
        ("127.0.0.1:8090", AllowEntry(ip=ipaddress.ip_address("127.0.0.1"), port=8090)),
        ("10.0.0.5", AllowEntry(ip=ipaddress.ip_address("10.0.0.5"))),
        ("::1", AllowEntry(ip=ipaddress.ip_address("::1"))),
        ("[::1]:80", AllowEntry(ip=ipaddress.ip_address("::1"), port=80)),
        (" Api.Internal:443 ", AllowEntry(host="api.internal", port=443)),
    ],
)
def test_allowlist_entries_parse(entry: str, parsed: AllowEntry) -> None:
    assert parse_allowlist([entry]) == (parsed,)


@pytest.mark.parametrize(
    "entry", ["api.internal", "api.internal:", ":80", "host:0", "host:70000", "[::1]", "h:x"]
)
def test_malformed_allowlist_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowlist entry"):
        parse_allowlist([entry])


def test_policy_builds_from_settings_values() -> None:
    policy = AddressPolicy.from_settings(
        allow_private_upstreams=False, upstream_allowlist=("127.0.0.1:8090",)
    )
    assert policy.decide("127.0.0.1", host="127.0.0.1", port=8090).allowed
    assert not policy.decide("127.0.0.1", host="127.0.0.1", port=8091).allowed


LOOPBACK = [a for a, c in CATEGORIES if c is C.LOOPBACK]


@pytest.mark.parametrize("address", LOOPBACK)
def test_the_loopback_switch_opens_loopback_addresses(address: str) -> None:
    policy = AddressPolicy.from_settings(
        allow_private_upstreams=False, upstream_allowlist=(), allow_loopback_upstreams=True
    )
    decision = policy.decide(address, host="localhost", port=3000)
    assert (decision.allowed, decision.reason) == (True, "allow_loopback")


@pytest.mark.parametrize("address", [a for a in NON_PUBLIC if a not in LOOPBACK] + METADATA)
def test_the_loopback_switch_opens_nothing_but_loopback(address: str) -> None:
    decision = AddressPolicy(allow_loopback=True).decide(address, host="api.example", port=443)
    assert not decision.allowed
    assert decision.reason in ("private_address", "metadata")
