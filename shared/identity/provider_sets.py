"""The identity providers one agent trusts, ready to check its callers' tokens
(docs/architecture.md, "Identity").

A provider is configured by its issuer alone; its JWKS and introspection
endpoints come from its metadata, which ``MetadataCache`` discovers when the
first token arrives and keeps. ``ProviderSet`` builds its ``AccessTokenValidator``
from that metadata and builds it again when a document changes or when a
provider whose metadata could not be fetched becomes reachable; the results it
remembers outlive those rebuilds (one ``ResultCache`` per set). A set belongs to
one configuration: a changed configuration gets a new set, and the old one's
memory goes with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog

from shared.identity.access_tokens import Principal, looks_like_jwt, unverified_issuer
from shared.identity.fetching import Post
from shared.identity.issuers import Introspection, IssuerConfigError, TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.metadata_cache import MetadataCache, MetadataUnavailable
from shared.identity.refusals import TokenRefused
from shared.identity.result_cache import ResultCache
from shared.identity.validator import AccessTokenValidator

log = structlog.get_logger(__name__)

RETRY_MISSING_S = 30.0  # as the metadata cache's own retry interval
# How often a set asks the metadata cache again, which refreshes a document
# older than its TTL in the background; a changed one rebuilds the set.
LOOK_AGAIN_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderSettings:
    """A workspace's identity provider as configured, with its introspection
    secret opened; equal settings make an equal provider."""

    name: str
    issuer: str
    algorithms: tuple[str, ...]
    token_types: tuple[str, ...]
    subject_claim: str
    groups_claim: str | None
    leeway_s: int
    introspection_client_id: str | None = None
    introspection_secret: str | None = field(default=None, repr=False)

    def trusted(self, jwks_uri: str | None, introspection_endpoint: str | None) -> TrustedIssuer:
        introspection = None
        if (
            introspection_endpoint is not None
            and self.introspection_client_id
            and self.introspection_secret
        ):
            introspection = Introspection(
                endpoint=introspection_endpoint,
                client_id=self.introspection_client_id,
                client_secret=self.introspection_secret,
            )
        return TrustedIssuer(
            issuer=self.issuer,
            jwks_uri=jwks_uri,
            introspection=introspection,
            algorithms=self.algorithms,
            token_types=self.token_types,
            subject_claim=self.subject_claim,
            groups_claim=self.groups_claim,
            leeway_s=self.leeway_s,
        )


@dataclass(frozen=True, slots=True)
class IdentityParts:
    """What every provider set of a process shares: the metadata and key caches
    (one fetch per issuer, whatever number of agents trust it) and the way to
    post introspections."""

    metadata: MetadataCache
    jwks: JwksCache
    post: Post | None = None


class ProviderSet:
    """``authenticate``: the principal of a token for ``audience``, or ``TokenRefused``."""

    def __init__(self, providers: Sequence[ProviderSettings], parts: IdentityParts) -> None:
        self.providers = tuple(providers)
        self._parts = parts
        self._results = ResultCache()
        self._validator: AccessTokenValidator | None = None
        self._generation = -1  # of the metadata the validator was built from
        self._missing: frozenset[str] = frozenset()  # issuers whose metadata did not come
        self._look_at = 0.0  # when to ask the metadata cache again
        self._building: asyncio.Task[AccessTokenValidator] | None = None

    @property
    def issuers(self) -> tuple[str, ...]:
        return tuple(p.issuer for p in self.providers)

    def remembered(self, token: str, audience: str) -> Principal | None:
        """A token's principal from memory alone, with no await: what almost every
        call takes (no coroutine to build). None: ask ``authenticate``."""
        validator = self._validator
        # With metadata missing, a remembered wrong_issuer may be keys_unavailable.
        if validator is None or self._missing or self._stale():
            return None
        return validator.remembered(token, audience)

    async def authenticate(self, token: str, audience: str) -> Principal:
        validator = self._validator
        if validator is None:
            validator = await self._rebuilt()
        elif self._stale():
            self._rebuilt()  # in the background: a cached token never waits on an IdP
        try:
            return await validator.authenticate(token, audience)
        except TokenRefused as refused:
            # The token's issuer is trusted, but its keys could not be found yet.
            if refused.reason == "wrong_issuer" and self._awaits_metadata(token):
                raise TokenRefused("keys_unavailable", "provider metadata unreachable") from None
            raise

    def _awaits_metadata(self, token: str) -> bool:
        return (
            bool(self._missing)
            and looks_like_jwt(token)
            and (unverified_issuer(token) in self._missing)
        )

    def _stale(self) -> bool:
        # Integer and float comparisons on the hot path.
        if self._generation != self._parts.metadata.generation:
            return True
        return time.monotonic() >= self._look_at

    def _rebuilt(self) -> asyncio.Future[AccessTokenValidator]:
        task = self._building
        if task is None:
            task = self._building = asyncio.create_task(self._build())
            task.add_done_callback(self._built)
        return asyncio.shield(task)

    def _built(self, task: asyncio.Task[AccessTokenValidator]) -> None:
        self._building = None
        if not task.cancelled():
            task.exception()  # retrieved: a failed background build is logged by _build

    async def _build(self) -> AccessTokenValidator:
        cache = self._parts.metadata
        generation = cache.generation
        found = await asyncio.gather(
            *(cache.metadata(p.issuer) for p in self.providers), return_exceptions=True
        )
        issuers: list[TrustedIssuer] = []
        missing: set[str] = set()
        for provider, metadata in zip(self.providers, found, strict=True):
            if isinstance(metadata, BaseException):
                if not isinstance(metadata, MetadataUnavailable):
                    raise metadata
                missing.add(provider.issuer)  # logged by the metadata cache
                continue
            try:
                issuers.append(provider.trusted(metadata.jwks_uri, metadata.introspection_endpoint))
            except IssuerConfigError as exc:  # e.g. a plain-http jwks_uri off this machine
                log.warning("identity_metadata_unusable", issuer=provider.issuer, error=str(exc))
                missing.add(provider.issuer)
        # Two introspecting providers make opaque tokens ambiguous (validator):
        # only the first of them introspects.
        introspecting = False
        for i, issuer in enumerate(issuers):
            if issuer.introspection is not None:
                if introspecting:
                    issuers[i] = dataclasses.replace(issuer, introspection=None)
                introspecting = True
        validator = AccessTokenValidator(
            issuers, self._parts.jwks, self._results, post=self._parts.post
        )
        self._validator, self._generation, self._missing = validator, generation, frozenset(missing)
        self._look_at = time.monotonic() + (RETRY_MISSING_S if missing else LOOK_AGAIN_S)
        return validator
