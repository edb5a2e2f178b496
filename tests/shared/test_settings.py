from __future__ import annotations

import pytest

from shared.settings import SettingsError, load_settings


def test_defaults_match_the_documented_ports_and_refresh() -> None:
    settings = load_settings({})
    assert (settings.control_plane_port, settings.gateway_port) == (8000, 8080)
    assert settings.mcp_refresh_ms == 5000
    assert settings.allow_private_upstreams is False
    assert (settings.max_body_bytes, settings.max_document_bytes) == (1 << 20, 32 << 20)


def test_lists_and_booleans_are_parsed() -> None:
    settings = load_settings(
        {
            "CRANK_ALLOWED_ORIGINS": "https://a.example, https://b.example",
            "CRANK_ALLOW_PRIVATE_UPSTREAMS": "true",
        }
    )
    assert settings.allowed_origins == ("https://a.example", "https://b.example")
    assert settings.allow_private_upstreams is True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CRANK_GATEWAY_PORT", "eighty"),
        ("CRANK_ALLOW_PRIVATE_UPSTREAMS", "maybe"),
        ("CRANK_LANGUAGE", "de"),
        ("CRANK_KEY_LOOKUP_LIMIT", "20"),
        ("CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS", "five/10"),
        ("CRANK_TRUSTED_PROXIES", "10.0.0.1/8"),
        ("CRANK_TRUSTED_PROXIES", "*"),
        ("CRANK_MCP_MAX_BATCH_ITEMS", "0"),
        ("CRANK_MCP_MAX_BATCH_ANSWER_BYTES", "1024"),
        ("CRANK_MAX_BODY_BYTES", "0"),
        ("CRANK_MAX_DOCUMENT_BYTES", "-1"),
        ("CRANK_MAX_DOCUMENT_BYTES", str(2 << 30)),
        ("CRANK_PUBLIC_URL", "crank.example.com"),
        ("CRANK_PUBLIC_URL", "https://crank.example.com/approvals?x=1"),
        ("CRANK_WEBHOOK_RETRY_BASE_MS", "0"),
        ("CRANK_WEBHOOK_MAX_AGE_S", "0"),
        ("CRANK_WEBHOOK_RETENTION_DAYS", "-1"),
        ("CRANK_APPROVAL_WAIT_S", "-1"),
        ("CRANK_APPROVAL_WAIT_S", "3601"),
        ("CRANK_MCP_BODY_TIMEOUT_S", "0"),
        ("CRANK_MCP_BODY_TIMEOUT_S", "301"),
        ("CRANK_MCP_UNFINISHED_BODIES_PER_KEY", "0"),
    ],
)
def test_bad_values_are_clear_errors(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_missing_secret_key_explains_how_to_make_one() -> None:
    with pytest.raises(SettingsError, match="CRANK_SECRET_KEY"):
        load_settings({}).require_secret_key()


def test_the_hostile_input_bounds_have_their_documented_defaults() -> None:
    settings = load_settings({"CRANK_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.7"})
    assert (settings.key_lookup_limit, settings.key_lookup_limit_per_address) == ("20/1", "5/10")
    assert (settings.mcp_max_batch_items, settings.mcp_max_batch_answer_bytes) == (100, 4_194_304)
    assert settings.trusted_proxies == ("10.0.0.0/8", "192.0.2.7")
    assert (settings.mcp_body_timeout_s, settings.mcp_unfinished_bodies_per_key) == (10, 16)


def test_webhook_settings_default_to_a_day_of_retries_from_five_seconds() -> None:
    settings = load_settings({"CRANK_PUBLIC_URL": "https://crank.example.com/"})
    assert settings.public_url == "https://crank.example.com/"
    assert (settings.webhook_retry_base_ms, settings.webhook_max_age_s) == (5000, 86400)
    assert settings.webhook_retention_days == 30


def test_an_approval_wait_of_55_seconds_is_the_default_and_0_turns_it_off() -> None:
    assert load_settings({}).approval_wait_s == 55
    assert load_settings({"CRANK_APPROVAL_WAIT_S": "0"}).approval_wait_s == 0
