"""Keys for the identity tests, made once per session (RSA generation is slow)."""

from __future__ import annotations

import pytest
from joserfc.jwk import ECKey, RSAKey

from tests.support.identity import ec_key, rsa_key


@pytest.fixture(scope="session")
def rsa() -> RSAKey:
    return rsa_key("rsa-1")


@pytest.fixture(scope="session")
def rsa_next() -> RSAKey:
    """The key the IdP rotates to."""
    return rsa_key("rsa-2")


@pytest.fixture(scope="session")
def ec() -> ECKey:
    return ec_key("ec-1")
