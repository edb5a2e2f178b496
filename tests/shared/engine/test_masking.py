"""shared.engine.masking: every spelling of a secret is hidden, before any cut."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from shared.engine.masking import MASK, NO_SECRETS, Masker, masker_for
from shared.engine.request_builder import build_request
from shared.engine.response_selector import excerpt
from shared.engine.spec import operation_from_builtins
from tests.support.masking import spellings

SECRET = 'tok/en+abc"é z'


@pytest.mark.parametrize(("name", "spelling"), spellings(SECRET).items())
def test_every_spelling_of_a_secret_is_masked(name: str, spelling: str) -> None:
    assert Masker([SECRET]).text(f"<{spelling}>") == f"<{MASK}>", name


def test_a_json_escaped_base64_form_is_masked_too() -> None:
    value = "??>>??"  # base64 "Pz8+Pj8/": "+" and "/", which a JSON encoder may escape
    encoded = base64.b64encode(value.encode()).decode()
    assert Masker([value]).text(json.dumps({"a": encoded}).replace("/", "\\/")) == '{"a": "****"}'


def test_a_secret_of_letters_and_digits_escaped_character_by_character_is_masked() -> None:
    # No anchor (a run of letters) is left in the text: the quick test must not skip it.
    secret = "shop-token-7f3a9c"
    lower = "".join(f"\\u{ord(c):04x}" for c in secret)
    upper = "".join(f"\\u{ord(c):04X}" for c in secret)
    body = f'{{"echo": "{lower}", "again": "{upper}"}}'.encode()
    masker = Masker([secret])
    assert masker.text(body.decode()) == '{"echo": "****", "again": "****"}'
    assert masker.excerpt(body, 30) == ('{"echo": "****", "again": "**…', True)
    assert masker.value({"k": [lower]}) == {"k": [MASK]}


def test_text_without_a_secret_is_returned_as_it_is() -> None:
    text = "nothing to hide here: tok/en, abc"
    assert Masker([SECRET]).text(text) is text


def test_nothing_is_masked_without_secrets() -> None:
    assert not NO_SECRETS
    assert not masker_for(())
    assert not Masker(["", ""])
    value = {"a": [SECRET]}
    assert NO_SECRETS.value(value) is value
    assert NO_SECRETS.text(SECRET) == SECRET


def test_the_longest_secret_wins_where_two_overlap() -> None:
    assert Masker(["abc", "abcdef"]).text("token abc and abcdef") == "token **** and ****"


def test_nested_values_are_masked_in_keys_and_strings_and_left_alone_elsewhere() -> None:
    value = {SECRET: [f"x{SECRET}y", 1, None, {"k": quote(SECRET, safe="")}], "n": 2.5}
    masked = Masker([SECRET]).value(value)
    assert masked == {MASK: [f"x{MASK}y", 1, None, {"k": MASK}], "n": 2.5}
    clean = {"a": ["b", 1]}
    assert Masker([SECRET]).value(clean) is clean  # nothing to mask: no copy


def test_a_secret_straddling_the_cut_leaves_no_prefix_behind() -> None:
    masker = Masker([SECRET])
    for offset in range(len(SECRET) + 2):
        body = ("a" * (800 - offset) + SECRET + "b" * 3000).encode()
        text, cut = masker.head(body, 800)
        assert cut
        assert len(text) <= 800
        assert "tok" not in text
        assert text.startswith("a" * (800 - offset))
        assert masker.excerpt(body, 800) == (text[:799] + "…", True)


def test_the_head_of_a_short_body_is_all_of_it_masked() -> None:
    assert Masker([SECRET]).head(f"x {SECRET} y".encode(), 800) == (f"x {MASK} y", False)
    assert NO_SECRETS.head(b"abcdef", 3) == ("abc", True)


def test_an_excerpt_is_masked_then_cut_with_the_mark_inside_the_limit() -> None:
    assert Masker([SECRET]).excerpt(f"x {SECRET}".encode(), 20) == (f"x {MASK}", False)
    assert NO_SECRETS.excerpt(b"abcdef", 4) == ("abc…", True)
    assert NO_SECRETS.excerpt(b"abcdef", 4, mark="") == ("abcd", True)
    assert NO_SECRETS.excerpt(b"abcdef", 6) == ("abcdef", False)


def test_an_excerpt_is_tidied_after_masking_and_before_the_cut() -> None:
    masker = Masker([SECRET])
    body = f"{SECRET}\n\n   {SECRET}".encode()
    text, cut = masker.excerpt(body, 10, read=40, tidy=lambda t: " ".join(t.split()))
    assert (text, cut) == (f"{MASK} {MASK}", False)
    assert masker.excerpt(body, 6, read=40, tidy=lambda t: " ".join(t.split())) == (
        f"{MASK} …",
        True,
    )


def test_an_excerpt_is_masked_before_whitespace_and_the_cut_shorten_it() -> None:
    # The secret straddles the 800-character window; once the spaces collapse its
    # start would be the first thing in the excerpt. " tail" is past the window: left out.
    body = (" " * 795 + SECRET + " tail").encode()
    assert excerpt(body, Masker([SECRET])) == MASK + "…"


def test_a_basic_auth_password_echoed_alone_is_masked() -> None:
    spec = operation_from_builtins(
        {
            "name": "get_thing",
            "description": "Gets a thing. Use when the user asks for the thing by id.",
            "input": {"type": "object", "properties": {}},
            "request": {
                "method": "GET",
                "url": "https://api.example.com/thing",
                "auth": {"type": "basic", "secret": "BASIC"},
            },
        }
    )
    built = build_request(spec, {}, {"BASIC": "alice:pa/ss+w0rd"})
    token = base64.b64encode(b"alice:pa/ss+w0rd").decode()
    echoed = f"user alice, password pa/ss+w0rd, pa%2Fss%2Bw0rd, {token}, alice:pa/ss+w0rd"
    assert built.masker.text(echoed) == "user alice, password ****, ****, ****, ****"
    assert "w0rd" not in json.dumps(built.redacted())


def test_a_masker_is_built_once_per_set_of_values() -> None:
    assert masker_for(("one", "two")) is masker_for(("one", "two"))
    assert "one" not in repr(masker_for(("one",)))
