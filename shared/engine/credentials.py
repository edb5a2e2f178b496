"""Credentials in clear: static names and values in a spec that look like a secret.

A static header, a literal in a ``request.query`` expression and the URL's
own query are stored with the spec, shown to every viewer and written
to every export. A credential belongs in an encrypted workspace secret bound
with ``request.auth`` (docs/architecture.md, "Secrets and masking").
``static_credentials`` is the one detector: the write-time check refuses what
it finds (shared.engine.spec_validation) and the linter reports the same
(``static-credential``), so the two cannot disagree.

A name looks like a credential when its last word is one (``X-Api-Key``,
``access_token``, ``Proxy-Authorization``, ``Cookie``, ``key``); a value when
it carries an HTTP auth scheme (``Bearer ...``), a well-known key prefix
(``sk_live_``, ``ghp_``, ``xoxb-``, ``AKIA``, a JWT ``eyJ...``) or is a long
random-looking string (``_random_looking``). The last word decides, so ``token_type`` or
``X-Auth-Method`` pass.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Final, NamedTuple
from urllib.parse import parse_qsl, urlsplit

import jmespath.exceptions
import jmespath.parser

from shared.engine.spec import OperationSpec

_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_CREDENTIAL_WORDS: Final = frozenset(
    {
        "auth",
        "authorization",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "cookie",
        "credential",
        "credentials",
    }
)
# "key" is a credential after these words, or alone; "sort_key" is not.
_KEY_QUALIFIERS: Final = frozenset({"api", "access", "private", "secret", "auth", "subscription"})
_AUTH_SCHEME: Final = re.compile(
    r"(?i)(?:bearer|basic|token|digest|negotiate|ntlm|hawk|aws4-hmac-sha256)\s+\S"
)
_KNOWN_KEYS: Final = (
    (re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{8,}"), "a Stripe secret key"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"), "a GitHub token"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{8,}"), "a Slack token"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "an AWS access key id"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "a Google API key"),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{16,}"), "a GitLab token"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"), "an API secret key (sk-...)"),
    (re.compile(r"\bSG\.[\w-]{16,}\.[\w-]{16,}"), "a SendGrid key"),
    (re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"), "a JSON Web Token"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key"),
)
# A long run of token characters, judged by its letters and digits (_random_looking).
_TOKEN_RUN: Final = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
_HEX: Final = re.compile(r"[0-9a-f]+|[0-9A-F]+")
_MIN_ALNUM: Final = 20
_MIN_HEX_KEY: Final = 32  # 128 bits in hex: a key or a hash, never a word
_ALPHABETS: Final = {"lower": 26, "upper": 26, "digit": 10}
# A random string switches between lower, upper and digit about as often as
# chance says; words (even CamelCase ones with a number) switch far less.
_SWITCH_SHARE: Final = 0.6
_ADVICE: Final = (
    "a static value is stored in clear and shown to every viewer and in exports: "
    "put it in a workspace secret and bind it with request.auth"
)


class StaticCredential(NamedTuple):
    """A credential found in clear: ``field`` is its path in the spec."""

    field: str
    message: str


def credential_name(name: str) -> bool:
    """Whether a header or parameter name names a credential (its last word decides)."""
    words = [word.lower() for word in _WORD.findall(name)]
    if not words:
        return False
    if words[-1] in _CREDENTIAL_WORDS:
        return True
    if words[-1] == "key":
        return len(words) == 1 or words[-2] in _KEY_QUALIFIERS
    return False


def _kind(char: str) -> str:
    return "digit" if char.isdigit() else "upper" if char.isupper() else "lower"


def _random_looking(run: str) -> bool:
    """Whether a run of token characters reads as random: a long hex string with
    letters and digits, or letters and digits that switch class as often as a
    random string does (``_SWITCH_SHARE`` of what chance gives for the classes in it)."""
    alnum = [char for char in run if char.isascii() and char.isalnum()]
    if len(alnum) < _MIN_ALNUM or _UUID.fullmatch(run):
        return False  # a UUID is an id, not a key
    counts = Counter(map(_kind, alnum))
    present = [kind for kind, count in counts.items() if count >= 2]
    if len(present) < 2:
        return False
    text = "".join(alnum)
    if _HEX.fullmatch(text):
        if len(text) >= _MIN_HEX_KEY:
            return True
        sizes = {"digit": 10, "lower": 6, "upper": 6}
    else:
        sizes = _ALPHABETS
    total = sum(sizes[kind] for kind in present)
    chance = 1 - sum((sizes[kind] / total) ** 2 for kind in present)
    switches = sum(_kind(a) != _kind(b) for a, b in itertools.pairwise(alnum))
    return switches / (len(alnum) - 1) >= _SWITCH_SHARE * chance


def credential_value(value: str) -> str | None:
    """What a value looks like when it looks like a credential ("a GitHub token"), else None."""
    if _AUTH_SCHEME.match(value.strip()):
        return "an Authorization value"
    for pattern, kind in _KNOWN_KEYS:
        if pattern.search(value):
            return kind
    if any(_random_looking(run) for run in _TOKEN_RUN.findall(value)):
        return "a long random string (a key or token)"
    return None


def _judge(field: str, name: str | None, value: str, binding: str) -> StaticCredential | None:
    if name is not None and credential_name(name):
        what = f"{name!r} names a credential"
    else:
        kind = credential_value(value)
        if kind is None:
            return None
        what = f"the value {'of ' + repr(name) + ' ' if name else ''}looks like {kind}"
    return StaticCredential(field, f"{what}; {_ADVICE} ({binding})")


def _literal(expression: str) -> str | None:
    """The string an expression is when it is only a literal (``'abc'``, `` `"abc"` ``)."""
    try:
        ast = jmespath.parser.Parser().parse(expression).parsed
    except jmespath.exceptions.JMESPathError:
        return None  # validation reports an expression that does not compile
    value = ast.get("value") if ast.get("type") == "literal" else None
    return value if isinstance(value, str) else None


def static_credentials(spec: OperationSpec) -> list[StaticCredential]:
    """Every credential ``spec`` holds in clear, one per field (see the module docstring)."""
    request = spec.request
    found: list[StaticCredential | None] = []
    for header, value in (request.headers or {}).items():
        binding = f"type: header, name: {header}, secret: NAME"
        found.append(_judge(f"request.headers.{header}", header, value, binding))
    try:
        url_query = parse_qsl(urlsplit(request.url).query, keep_blank_values=True)
    except ValueError:
        url_query = []  # validation reports a URL that does not parse
    for name, value in url_query:
        binding = f"type: query, name: {name}, secret: NAME"
        found.append(_judge("request.url", name, value, binding))
    for param, expression in (request.query or {}).items():
        literal = _literal(expression)
        if literal is not None:
            binding = f"type: query, name: {param}, secret: NAME"
            found.append(_judge(f"request.query.{param}", param, literal, binding))
    unique: dict[str, StaticCredential] = {}
    for credential in found:
        if credential is not None:
            unique.setdefault(credential.field, credential)
    return list(unique.values())
