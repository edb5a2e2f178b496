"""The local checks of a JWT access token (RFC 9068, RFC 8725): every refusal, and
the principal a good token gives (shared.identity.access_tokens)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from joserfc.jwk import ECKey, Key, OctKey, OKPKey, RSAKey

from shared.identity.access_tokens import Principal, unverified_issuer, validate
from shared.identity.issuers import IssuerConfigError, TrustedIssuer
from shared.identity.key_sets import VerificationKeys, parse_jwks
from shared.identity.refusals import TokenRefused
from tests.support.identity import (
    AUDIENCE,
    NOW,
    OTHER_AUDIENCE,
    claims,
    hmac_with_public_pem,
    jwks,
    mint,
    sign,
)

ISSUER = "https://idp.example/realms/acme"
JWKS_URI = "https://idp.example/realms/acme/jwks"


def trusted(**overrides: Any) -> TrustedIssuer:
    return TrustedIssuer(**{"issuer": ISSUER, "jwks_uri": JWKS_URI, **overrides})


@pytest.fixture(scope="module")
def keys(rsa: RSAKey, ec: ECKey) -> VerificationKeys:
    return parse_jwks(jwks(rsa, ec))


def refusal(token: str, keys: VerificationKeys, issuer: TrustedIssuer | None = None) -> str:
    with pytest.raises(TokenRefused) as caught:
        validate(token, issuer or trusted(), AUDIENCE, keys, NOW)
    return caught.value.reason


# -- accepted --------------------------------------------------------------------------


def test_an_rs256_token_gives_its_principal(rsa: RSAKey, keys: VerificationKeys) -> None:
    token = mint(rsa, ISSUER, name="Ada Lovelace", email="ada@example.com")
    assert validate(token, trusted(), AUDIENCE, keys, NOW) == Principal(
        issuer=ISSUER,
        subject="user-42",
        display_name="Ada Lovelace",
        client_id="claude-desktop",
        groups=(),
        scopes=frozenset({"orders:read", "orders:write"}),
        expires_at=NOW + 600,
    )


def test_an_es256_token_with_scp_list_azp_and_groups(ec: ECKey, keys: VerificationKeys) -> None:
    token = mint(
        ec,
        ISSUER,
        alg="ES256",
        scope=None,
        client_id=None,
        scp=["orders:read"],
        azp="cursor",
        preferred_username="ada",
        roles=["approvers", "sales"],
    )
    principal = validate(token, trusted(groups_claim="roles"), AUDIENCE, keys, NOW)
    assert (principal.scopes, principal.client_id, principal.display_name, principal.groups) == (
        frozenset({"orders:read"}),
        "cursor",
        "ada",
        ("approvers", "sales"),
    )


@pytest.mark.parametrize(("claim", "vendor"), [("cid", "okta"), ("appid", "entra-v1")])
def test_the_client_is_read_from_the_claim_each_provider_names_it_in(
    ec: ECKey, keys: VerificationKeys, claim: str, vendor: str
) -> None:
    token = mint(ec, ISSUER, alg="ES256", client_id=None, **{claim: vendor})
    assert validate(token, trusted(), AUDIENCE, keys, NOW).client_id == vendor


@pytest.mark.parametrize(
    ("alg", "make"),
    [
        ("PS256", lambda: RSAKey.generate_key(2048, parameters={"kid": "ps"}, private=True)),
        ("ES384", lambda: ECKey.generate_key("P-384", parameters={"kid": "es384"}, private=True)),
        ("EdDSA", lambda: OKPKey.generate_key("Ed25519", parameters={"kid": "ed"}, private=True)),
        ("Ed25519", lambda: OKPKey.generate_key("Ed25519", parameters={"kid": "ed"}, private=True)),
    ],
)
def test_the_other_default_algorithms(alg: str, make: Callable[[], Key]) -> None:
    key = make()
    token = mint(key, ISSUER, alg=alg)
    assert validate(token, trusted(), AUDIENCE, parse_jwks(jwks(key)), NOW).subject == "user-42"


def test_a_long_header_of_a_real_idp_is_accepted(rsa: RSAKey, keys: VerificationKeys) -> None:
    # Azure-style: x5t, nonce and a long kid push the header past joserfc's 512 bytes.
    header = {"alg": "RS256", "typ": "at+jwt", "kid": rsa.kid, "nonce": "n" * 300, "x5t": "t" * 43}
    token = sign(header, claims(ISSUER), rsa, "RS256")
    assert validate(token, trusted(), AUDIENCE, keys, NOW).subject == "user-42"


def test_aud_may_be_a_list_holding_this_agent(rsa: RSAKey, keys: VerificationKeys) -> None:
    token = mint(rsa, ISSUER, aud=[OTHER_AUDIENCE, AUDIENCE])
    assert validate(token, trusted(), AUDIENCE, keys, NOW).subject == "user-42"


def test_a_plain_jwt_type_when_the_issuer_is_configured_for_it(
    rsa: RSAKey, keys: VerificationKeys
) -> None:
    issuer = trusted(token_types=("JWT",))
    assert validate(mint(rsa, ISSUER, typ="JWT"), issuer, AUDIENCE, keys, NOW).subject
    untyped = sign({"alg": "RS256", "kid": rsa.kid}, claims(ISSUER), rsa, "RS256")
    assert validate(untyped, issuer, AUDIENCE, keys, NOW).subject
    assert refusal(untyped, keys) == "wrong_type"  # at+jwt only: a type is required


def test_the_media_type_spelling_of_at_jwt(rsa: RSAKey, keys: VerificationKeys) -> None:
    token = mint(rsa, ISSUER, typ="application/AT+JWT")
    assert validate(token, trusted(), AUDIENCE, keys, NOW).subject == "user-42"


def test_the_leeway_accepts_small_clock_skew(rsa: RSAKey, keys: VerificationKeys) -> None:
    token = mint(rsa, ISSUER, exp=int(NOW) - 20, iat=int(NOW) + 20, nbf=int(NOW) + 20)
    assert validate(token, trusted(), AUDIENCE, keys, NOW).subject == "user-42"


# -- refused (RFC 8725) ----------------------------------------------------------------


def test_alg_none_is_refused(rsa: RSAKey, keys: VerificationKeys) -> None:
    token = sign({"alg": "none", "typ": "at+jwt"}, claims(ISSUER), None, "none")
    assert refusal(token, keys) == "algorithm_not_allowed"


def test_hs256_keyed_with_the_rsa_public_pem_is_refused(
    rsa: RSAKey, keys: VerificationKeys
) -> None:
    header = {"alg": "HS256", "typ": "at+jwt", "kid": rsa.kid}
    assert refusal(hmac_with_public_pem(header, claims(ISSUER), rsa), keys) == (
        "algorithm_not_allowed"
    )


def test_an_algorithm_outside_the_issuers_list_is_refused(
    ec: ECKey, keys: VerificationKeys
) -> None:
    token = mint(ec, ISSUER, alg="ES256")
    assert refusal(token, keys, trusted(algorithms=("RS256",))) == "algorithm_not_allowed"


def test_a_header_algorithm_that_does_not_fit_the_key_is_refused(
    rsa: RSAKey, ec: ECKey, keys: VerificationKeys
) -> None:
    # Signed by the EC key but naming the RSA key's kid.
    token = sign({"alg": "ES256", "typ": "at+jwt", "kid": rsa.kid}, claims(ISSUER), ec, "ES256")
    assert refusal(token, keys) == "algorithm_not_allowed"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("jwk", "embedded"),
        ("jku", "https://attacker.example/jwks"),
        ("x5u", "https://attacker.example/cert"),
        ("x5c", ["MIIB"]),
        ("crit", ["exp"]),
    ],
)
def test_headers_that_bring_their_own_key_are_refused(
    rsa: RSAKey, keys: VerificationKeys, name: str, value: Any
) -> None:
    if name == "jwk":
        value = rsa.as_dict(private=False)
    header = {"alg": "RS256", "typ": "at+jwt", "kid": rsa.kid, name: value}
    assert refusal(sign(header, claims(ISSUER), rsa, "RS256"), keys) == "forbidden_header"


def test_a_token_signed_by_a_key_outside_the_set_is_a_bad_signature(
    rsa: RSAKey, keys: VerificationKeys
) -> None:
    from tests.support.identity import rsa_key

    impostor = rsa_key(rsa.kid or "")  # same kid, other key
    assert refusal(mint(impostor, ISSUER), keys) == "bad_signature"


def test_a_tampered_payload_is_a_bad_signature(rsa: RSAKey, keys: VerificationKeys) -> None:
    header, _, signature = mint(rsa, ISSUER).split(".")
    forged = sign({}, claims(ISSUER, sub="admin"), None, "none").split(".")[1]
    assert refusal(f"{header}.{forged}.{signature}", keys) == "bad_signature"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"typ": "JWT"}, "wrong_type"),
        ({"typ": "id_token+jwt"}, "wrong_type"),
        ({"iss": "https://idp.example/realms/other"}, "wrong_issuer"),
        ({"iss": ISSUER + "/"}, "wrong_issuer"),  # byte for byte
        ({"aud": OTHER_AUDIENCE}, "wrong_audience"),  # a token for another agent
        ({"aud": ["https://api.other-service.example"]}, "wrong_audience"),
        ({"aud": AUDIENCE + "/"}, "wrong_audience"),
        ({"aud": None}, "missing_claim"),
        ({"exp": None}, "missing_claim"),
        ({"sub": None}, "missing_claim"),
        ({"exp": int(NOW) - 31}, "expired"),
        ({"nbf": int(NOW) + 31}, "not_yet_valid"),
        ({"iat": int(NOW) + 31}, "issued_in_future"),
        ({"exp": "tomorrow"}, "malformed"),
        ({"scope": 7}, "malformed"),
    ],
)
def test_claims_and_types_that_are_refused(
    rsa: RSAKey, keys: VerificationKeys, extra: dict[str, Any], reason: str
) -> None:
    assert refusal(mint(rsa, ISSUER, **extra), keys) == reason


def test_a_token_without_kid_is_refused_when_the_set_has_several_keys(
    rsa: RSAKey, keys: VerificationKeys
) -> None:
    token = sign({"alg": "RS256", "typ": "at+jwt"}, claims(ISSUER), rsa, "RS256")
    assert refusal(token, keys) == "missing_key_id"
    only = parse_jwks(jwks(rsa))
    assert validate(token, trusted(), AUDIENCE, only, NOW).subject == "user-42"


def test_an_unknown_kid_is_refused(rsa: RSAKey, keys: VerificationKeys) -> None:
    from tests.support.identity import rsa_key

    assert refusal(mint(rsa_key("rotated-away"), ISSUER), keys) == "unknown_key"


@pytest.mark.parametrize(
    "token",
    ["", "abc", "a.b", "a.b.c.d.e", "!!.e30.", "W10.e30.sig", "x" * 20_000],
)
def test_malformed_tokens(token: str, keys: VerificationKeys) -> None:
    # W10 is "[]": a header that is no JSON object.
    assert refusal(token, keys) == "malformed"


def test_a_header_without_alg_is_refused(keys: VerificationKeys) -> None:
    assert refusal("e30.e30.", keys) == "algorithm_not_allowed"  # header "{}"


def test_unverified_issuer_reads_iss_only_for_routing(rsa: RSAKey) -> None:
    assert unverified_issuer(mint(rsa, ISSUER)) == ISSUER
    with pytest.raises(TokenRefused):
        unverified_issuer(mint(rsa, ISSUER, iss=None))


# -- the issuer's settings -------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"algorithms": ("HS256",)}, "algorithms"),
        ({"algorithms": ("none",)}, "algorithms"),
        ({"algorithms": ()}, "algorithms"),
        ({"token_types": ("id_token",)}, "token_types"),
        ({"issuer": "http://idp.example"}, "issuer"),  # plain http only to loopback
        ({"jwks_uri": "ftp://idp.example/jwks"}, "jwks_uri"),
        ({"leeway_s": 3600}, "leeway_s"),
    ],
)
def test_unsafe_issuer_settings_are_refused_with_the_field(
    overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(IssuerConfigError, match=f"^{field}:"):
        trusted(**overrides)


# -- the key set -----------------------------------------------------------------------


def test_symmetric_and_encryption_keys_in_a_jwks_are_skipped(rsa: RSAKey) -> None:
    import json

    document = json.loads(jwks(rsa))
    secret = OctKey.generate_key(256, parameters={"kid": "shared"}).as_dict(private=True)
    enc = dict(document["keys"][0], kid="enc-1", use="enc")
    document["keys"] += [secret, enc]
    keys = parse_jwks(json.dumps(document).encode())
    assert sorted(keys.by_kid) == [rsa.kid]
