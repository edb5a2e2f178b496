"""Path values cannot walk out of the operation's path (docs/security.md,
"Credentials and path values").

Each value is percent-encoded, but an upstream may decode ``%2F`` (or treat
``\\`` as ``/``) before it normalises, adjacent variables can form ``..``
together, and reserved expansion ``{+path}`` carries ``/`` by design. The
builder refuses what is or could decode to a dot segment; every built URL
keeps the template's static prefix under the most lenient normalisation.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import time
import unicodedata
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from shared.engine.errors import ToolError
from shared.engine.request_builder import RequestBuilder
from shared.engine.spec import operation_from_builtins
from shared.engine.spec_validation import validate_operation

HOST = "https://api.example.com"


def builder(path: str) -> RequestBuilder:
    names = re.findall(r"\{\+?(\w+)\}", path)
    spec = operation_from_builtins(
        {
            "name": "get_file",
            "description": "Gets a file.",
            "input": {
                "type": "object",
                "properties": {name: {"type": "string"} for name in names},
                "required": names,
            },
            "request": {"method": "GET", "url": HOST + path},
        }
    )
    assert validate_operation(spec) == []
    return RequestBuilder(spec)


def refused(build: RequestBuilder, arguments: dict[str, Any]) -> set[str]:
    """The argument fields of the invalid_arguments error that building raises."""
    with pytest.raises(ToolError) as caught:
        build.build(arguments)
    assert caught.value.error_code == "invalid_arguments"
    return {error["field"] for error in caught.value.details["errors"]}


def path_of(build: RequestBuilder, arguments: dict[str, Any]) -> str:
    parts = urlsplit(build.build(arguments).url)
    assert (parts.scheme, parts.netloc, parts.query, parts.fragment) == (
        "https",
        "api.example.com",
        "",
        "",
    )
    return parts.path


def most_lenient(path: str) -> str:
    """The path as the most lenient upstream reads it: decoded over and over,
    NFKC-normalised, ``\\`` as ``/``, ``;params`` and trailing spaces dropped,
    then dot segments resolved."""
    for _ in range(6):
        path = unquote(path)
    path = unicodedata.normalize("NFKC", path).replace("\\", "/")
    segments = [s.split(";", 1)[0].strip() for s in path.split("/")]
    # Windows and some proxies read "..." as "..".
    segments = [".." if s and not s.strip(".") and len(s) > 1 else s for s in segments]
    return posixpath.normpath("/".join(segments))


@pytest.mark.parametrize(
    ("path", "arguments", "fields"),
    [
        ("/v1/{a}{b}", {"a": ".", "b": "."}, {"$.a", "$.b"}),
        ("/v1/{a}{b}", {"a": "%2e", "b": "."}, {"$.a", "$.b"}),
        ("/v1/{a}{b}", {"a": "%2E", "b": "%252e"}, {"$.a", "$.b"}),
        ("/v1/{a}{b}", {"a": "\uff0e", "b": "."}, {"$.a", "$.b"}),  # a fullwidth dot
        ("/v1/{a}.{b}", {"a": ".", "b": "."}, {"$.a", "$.b"}),  # "..." reads as ".."
        ("/v1/{a}{b}/x", {"a": ".", "b": ".;jsessionid=1"}, {"$.a", "$.b"}),
        ("/v1/{a}{b}", {"a": "..", "b": " "}, {"$.a", "$.b"}),
        ("/v1/{a}/{b}", {"a": "x", "b": ".."}, {"$.b"}),
    ],
)
def test_adjacent_variables_cannot_form_a_dot_segment(
    path: str, arguments: dict[str, str], fields: set[str]
) -> None:
    assert refused(builder(path), arguments) == fields


@pytest.mark.parametrize(
    ("path", "arguments", "built"),
    [
        ("/v1/{a}.{b}", {"a": "report", "b": "pdf"}, "/v1/report.pdf"),
        ("/v1/{a}.{b}", {"a": ".", "b": "x"}, "/v1/..x"),  # not a dot segment
        ("/v1/x{a}", {"a": ".."}, "/v1/x.."),
        ("/v1/{a}{b}", {"a": "v1.2", "b": ".3"}, "/v1/v1.2.3"),
    ],
)
def test_dots_inside_a_segment_are_sent(path: str, arguments: dict[str, str], built: str) -> None:
    assert path_of(builder(path), arguments) == built


@pytest.mark.parametrize(
    "value",
    [
        "a/b",
        "a%2Fb",
        "a%2fb",
        "a%252Fb",
        "a\\b",
        "a%5Cb",
        "..%2F..%2Fadmin",
        "%2e%2e",
        "%2E%2e",
        "%252e%252e",
        "a\x00",
        "a%00",
        "a\r\nb",
    ],
)
def test_a_simple_variable_carries_no_separator_even_encoded(value: str) -> None:
    assert refused(builder("/v1/files/{name}"), {"name": value}) == {"$.name"}


@pytest.mark.parametrize(
    ("value", "built"),
    [
        ("docs/readme.md", "/v1/files/docs/readme.md/raw"),
        ("a b/c?d#e", "/v1/files/a%20b/c%3Fd%23e/raw"),
        ("x/..y/z.", "/v1/files/x/..y/z./raw"),
        ("50%/x", "/v1/files/50%25/x/raw"),
    ],
)
def test_reserved_expansion_carries_slashes(value: str, built: str) -> None:
    assert path_of(builder("/v1/files/{+path}/raw"), {"path": value}) == built


@pytest.mark.parametrize(
    "value",
    [
        "..",
        "../etc/passwd",
        "a/../../b",
        "a/./b",
        "a/...",
        "a%2F..%2Fb",
        "a/%2e%2e/b",
        "a/%252e%252e/b",
        "a/..;/b",
        "a/\uff0e\uff0e/b",
        "/etc/passwd",  # an empty segment: "//" can make a network-path reference
        "a//b",
        "a/",
        "a\\..\\b",
        "a%5c..%5cb",
    ],
)
def test_reserved_expansion_never_carries_a_dot_or_empty_segment(value: str) -> None:
    assert refused(builder("/v1/files/{+path}/raw"), {"path": value}) == {"$.path"}


PIECES = [".", "..", "%2e", "%2E", "%252e", "/", "%2f", "%2F", "\\", "%5c", ";", "x", "\uff0e", " "]
TEMPLATES = ["/v1/files/{a}", "/v1/files/{a}{b}", "/v1/files/{a}.{b}", "/v1/files/x{a}/{+b}"]


def test_no_built_url_escapes_the_static_prefix_under_lenient_normalisation() -> None:
    """Every value of up to three hostile pieces, in every template, alone and next to
    another: refused, or built under /v1/files/ however the upstream normalises."""
    values = [
        "".join(combo) for size in (1, 2, 3) for combo in itertools.product(PIECES, repeat=size)
    ]
    sent = refused_count = 0
    codes: set[str] = set()
    started = time.perf_counter()
    for template in TEMPLATES:
        build = builder(template)
        names = build.path_variables
        for value, other in itertools.product(values, ("x", ".")):
            arguments = {name: value if i == 0 else other for i, name in enumerate(names)}
            try:
                path = path_of(build, arguments)
            except ToolError as exc:
                codes.add(exc.error_code)
                refused_count += 1
                continue
            sent += 1
            assert path.startswith("/v1/files/"), (template, value, path)
            # "/v1/files" itself: a value such as ";" that a lenient reader drops.
            assert f"{most_lenient(path)}/".startswith("/v1/files/"), (template, value, path)
    assert sent > 1000  # x, x;x, " x" and their kin are ordinary values
    assert refused_count > 1000
    assert codes == {"invalid_arguments"}
    assert time.perf_counter() - started < 20


def test_a_huge_nested_encoding_costs_a_few_passes() -> None:
    """Decoding is bounded: "%25" nested 300000 times is decoded a few times, not 300000."""
    value = "%" + "25" * 300_000 + "2e"
    started = time.perf_counter()
    assert path_of(builder("/v1/files/{name}"), {"name": value}).startswith("/v1/files/%25")
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize(
    "url",
    [
        f"{HOST}/v1/../admin/{{a}}",
        f"{HOST}/v1/./x/{{a}}",
        f"{HOST}/v1/%2e%2e/{{a}}",
        f"{HOST}/v1/..;x/{{a}}",
    ],
)
def test_a_static_dot_segment_is_refused_at_write_time(url: str) -> None:
    spec = operation_from_builtins(
        {
            "name": "get_file",
            "description": "Gets a file.",
            "input": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "required": ["a"],
            },
            "request": {"method": "GET", "url": url},
        }
    )
    assert "request.url" in {error.field for error in validate_operation(spec)}
