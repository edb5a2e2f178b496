"""Who made a request: an agent key, or a person (or client) that one of the
agent's identity providers vouches for (docs/architecture.md, "Identity").

Every step of a call takes the ``Requester``: budgets, sessions, body reads and
confirmation tokens by its ``id``; the call log, approvals, traces and logs record
its ``key_id`` or its ``recorded`` principal (never the token).
"""

from __future__ import annotations

import functools
import hashlib

import msgspec

from shared.identity.access_tokens import Principal
from shared.principals import PrincipalRecord


class Requester(msgspec.Struct, frozen=True):
    """``id``: the key's id, or a negative number drawn from (agent, issuer,
    subject), so that one person has one budget and one set of sessions per
    agent whatever client and token they use. Key ids are positive, so the two
    never meet; two people meet with odds of 2^-56."""

    id: int
    key_id: int | None = None  # the agent key, when a key authenticated
    person: Principal | None = None  # the token's principal, when a token did
    # What the call log, the approval, traces and logs keep of the person (issuer,
    # subject, display name, client): made once here, read by each of them.
    recorded: PrincipalRecord | None = None

    @property
    def scopes(self) -> frozenset[str] | None:
        """The token's scopes; None for a key, which may use every tool of its agent."""
        return None if self.person is None else self.person.scopes

    @classmethod
    def of_key(cls, key_id: int) -> Requester:
        return cls(key_id, key_id)

    @classmethod
    def of_person(cls, agent_id: int, person: Principal) -> Requester:
        recorded = PrincipalRecord(
            issuer=person.issuer,
            subject=person.subject,
            name=person.display_name,
            client_id=person.client_id,
        )
        return cls(person_id(agent_id, person.issuer, person.subject), None, person, recorded)


@functools.lru_cache(maxsize=10_000)  # as many people as the result caches remember
def person_id(agent_id: int, issuer: str, subject: str) -> int:
    """The negative id of a person at an agent, drawn from SHA-256 of the three;
    remembered, since every call of a token would hash them again."""
    seed = f"{agent_id}\0{issuer}\0{subject}".encode()
    drawn = int.from_bytes(hashlib.sha256(seed).digest()[:7], "big")
    return -(drawn + 1)
