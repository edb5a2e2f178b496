"""The gateway's hot-path memories: resolved keys, verified sessions, request ids."""

from __future__ import annotations

import re
import time
from typing import Any, cast

import msgspec
import pytest

from mcp_gateway.catalog.keys import KeyLookupUnavailable, KeyResolver
from mcp_gateway.catalog.snapshot import Key, Snapshot
from mcp_gateway.request_ids import RequestIds
from mcp_gateway.sessions.signer import MalformedSessionId, SessionSigner
from shared.crypto import KeyHasher, b64url_encode
from shared.keys import KeyKind, generate_key

SECRET = "a-secret-key-for-the-hot-path-cache-tests-0123456789"


class _NoPool:
    """Any database look-up fails the test: these keys are all in the snapshot."""

    def connection(self, **_: Any) -> Any:
        raise AssertionError("no database look-up expected")


def _resolver() -> KeyResolver:
    return KeyResolver(KeyHasher(SECRET), cast(Any, _NoPool()), database_reachable=lambda: False)


def _snapshot(version: int, keys: dict[bytes, Key]) -> Snapshot:
    return Snapshot(version, time.monotonic(), {}, {}, keys)


async def test_a_key_revoked_by_a_publish_stops_at_the_swap_even_when_remembered() -> None:
    resolver = _resolver()
    token = generate_key(KeyKind.AGENT)
    key = Key(id=1, kind="agent", agent_id=7, expires_at=None)
    before = _snapshot(1, {KeyHasher(SECRET).hash(token): key})
    assert await resolver.resolve(token, before) == key
    assert await resolver.resolve(token, before) == key  # now from the memory

    after = _snapshot(2, {})  # the key was revoked
    resolver.snapshot_swapped(after)
    with pytest.raises(KeyLookupUnavailable):  # not remembered: it goes to the database
        await resolver.resolve(token, after)


async def test_a_newer_snapshot_is_not_answered_from_an_older_ones_memory() -> None:
    resolver = _resolver()
    token = generate_key(KeyKind.AGENT)
    key = Key(id=1, kind="agent", agent_id=7, expires_at=None)
    other = Key(id=2, kind="approval", agent_id=7, expires_at=None)
    digest = KeyHasher(SECRET).hash(token)
    assert await resolver.resolve(token, _snapshot(1, {digest: key})) == key
    # No swap notification (a caller holding another snapshot object): still no stale answer.
    assert await resolver.resolve(token, _snapshot(2, {digest: other})) == other


async def test_a_remembered_key_still_expires_on_time(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = _resolver()
    token = generate_key(KeyKind.AGENT)
    now = time.time()
    key = Key(id=1, kind="agent", agent_id=7, expires_at=now + 60)
    snapshot = _snapshot(1, {KeyHasher(SECRET).hash(token): key})
    assert await resolver.resolve(token, snapshot) == key
    monkeypatch.setattr("time.time", lambda: now + 60)
    assert await resolver.resolve(token, snapshot) is None


async def test_a_wrong_token_is_never_remembered_as_a_key() -> None:
    resolver = _resolver()
    token = generate_key(KeyKind.AGENT)
    snapshot = _snapshot(1, {KeyHasher(SECRET).hash(token): Key(1, "agent", 7, None)})
    assert await resolver.resolve(token, snapshot) is not None
    assert await resolver.resolve(token[:-1] + "x", snapshot) is None
    assert await resolver.resolve("crk_agent_short", snapshot) is None


def test_a_remembered_session_still_expires_and_a_forged_one_is_refused() -> None:
    signer = SessionSigner(SECRET, ttl_s=60)
    session_id = signer.issue(1, 2, "2025-06-18")
    claims = signer.verify(session_id)
    assert claims is not None
    assert signer.verify(session_id) == claims  # from the memory
    assert signer.verify(session_id, now=claims.issued_at + 59) == claims
    assert signer.verify(session_id, now=claims.issued_at + 60) is None
    forged = session_id[:-2] + ("AA" if not session_id.endswith("AA") else "BB")
    assert signer.verify(forged) is None
    assert signer.verify(forged) is None
    with pytest.raises(MalformedSessionId):
        signer.verify("bad id")


def test_a_session_of_another_secret_is_unknown_even_after_this_one_was_remembered() -> None:
    ours, theirs = SessionSigner(SECRET, ttl_s=60), SessionSigner(SECRET + "x", ttl_s=60)
    session_id = theirs.issue(1, 2, "2025-06-18")
    assert theirs.verify(session_id) is not None
    assert ours.verify(session_id) is None


def test_request_ids_are_unique_and_keep_their_shape() -> None:
    ids = RequestIds()
    seen = [ids.new() for _ in range(1000)]
    assert len(set(seen)) == 1000
    assert all(re.fullmatch(r"req_[0-9a-f]{16}", i) for i in seen)
    assert len({i[:12] for i in seen}) == 1


def test_a_new_prefix_is_drawn_when_the_counter_wraps_and_after_a_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefixes = iter(["0000000a", "0000000b", "0000000c"])
    monkeypatch.setattr("secrets.token_hex", lambda _: next(prefixes))
    ids = RequestIds()
    assert ids.new() == "req_0000000a00000000"
    ids._next = (1 << 32) - 1
    assert ids.new() == "req_0000000affffffff"
    assert ids.new() == "req_0000000b00000000"
    ids.reset()  # what os.register_at_fork runs in a child
    assert ids.new() == "req_0000000c00000000"


async def test_the_resolver_keeps_no_raw_token_in_memory() -> None:
    resolver = _resolver()
    token = generate_key(KeyKind.AGENT)
    snapshot = _snapshot(1, {KeyHasher(SECRET).hash(token): Key(1, "agent", 7, None)})
    assert await resolver.resolve(token, snapshot) is not None
    held = [value for value in vars(resolver).values() if isinstance(value, dict)]
    assert all(token not in memory and token.encode() not in memory for memory in held)


def test_the_elicitation_flag_is_signed_and_an_old_id_without_it_means_none() -> None:
    signer = SessionSigner(SECRET, ttl_s=60)
    flagged = signer.verify(signer.issue(1, 2, "2025-11-25", elicitation=True))
    assert flagged is not None
    assert flagged.elicitation is True
    # An id issued before the flag existed: five claims, the same signature scheme.
    old = msgspec.msgpack.encode([1, 2, "2025-06-18", int(time.time()), b"\0" * 12])
    payload = b64url_encode(old)
    claims = signer.verify(f"crs1.{payload}.{signer._sign(payload)}")
    assert claims is not None
    assert claims.elicitation is False


def test_a_person_id_is_drawn_once_and_stays_the_same() -> None:
    """``Requester.of_person``'s id is remembered per (agent, issuer, subject): the same
    negative number as SHA-256 of the three gives, one per agent, whatever the client."""
    import hashlib

    from mcp_gateway.vocabulary.requesters import Requester
    from shared.identity.access_tokens import Principal

    def person(client: str) -> Principal:
        return Principal(
            issuer="https://idp.example",
            subject="user-42",
            display_name=None,
            client_id=client,
            groups=(),
            scopes=frozenset(),
            expires_at=0.0,
        )

    seed = b"7\0https://idp.example\0user-42"
    expected = -(int.from_bytes(hashlib.sha256(seed).digest()[:7], "big") + 1)
    first, second = Requester.of_person(7, person("a")), Requester.of_person(7, person("b"))
    assert first.id == second.id == expected
    assert second.person == person("b")
    assert Requester.of_person(8, person("a")).id not in (expected, 0)
