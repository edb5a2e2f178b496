from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from litestar import Litestar, Router, post
from litestar.exceptions import ImproperlyConfiguredException
from litestar.params import JSONBody
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from control_plane.api_document import document_routes
from control_plane.api_document.constraints import anchored
from control_plane.api_document.examples import BODY_EXAMPLES
from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, dependencies
from control_plane.etag import ETAG_PATTERN
from control_plane.request_body import takes_body
from shared.db import Connection
from shared.engine.spec import WEBHOOK_FORMATS
from shared.engine.spec_validation import SLUG, TOOL_NAME
from tests.support.api import Client, auth


async def test_openapi_document_is_valid_openapi_3_1(client: Client) -> None:
    response = await client.get("/api/v1/schema/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    try:
        validate(document)
    except OpenAPIValidationError as exc:  # pragma: no cover - the message is the point
        raise AssertionError(f"invalid OpenAPI document: {exc}") from None
    assert any(path.startswith("/api/v1/workspaces") for path in document["paths"])


async def test_docs_page_is_served(client: Client) -> None:
    response = await client.get("/api/v1/schema/docs")
    assert response.status_code == 200
    assert "text/html" in response.headers["content-type"]


API = "/api/v1"
# The body routes in the order their examples build on each other (an agent binds
# the operation, a key and a webhook need the agent). The try-it route calls its
# upstream, so its example is only decoded (test_every_body_example_decodes...).
_EXAMPLE_ORDER = [
    ("post", "/workspaces"),
    ("post", "/workspaces/{workspace}/operations"),
    ("put", "/workspaces/{workspace}/operations/{name}"),
    ("post", "/workspaces/{workspace}/agents"),
    ("put", "/workspaces/{workspace}/agents/{slug}"),
    ("post", "/workspaces/{workspace}/agents/{agent}/webhooks"),
    ("post", "/workspaces/{workspace}/keys"),
    ("put", "/workspaces/{workspace}/secrets/{name}"),
    ("put", "/workspaces/{workspace}/egress/hosts"),
    ("put", "/workspaces/{workspace}/egress/grants"),
    ("post", "/workspaces/{workspace}/identity-providers"),
    ("put", "/workspaces/{workspace}/identity-providers/{provider}"),
    ("post", "/workspaces/{workspace}/lint"),
    ("post", "/workspaces/{workspace}/apply"),
    ("post", "/workspaces/{workspace}/import/openapi"),
]
_OUTBOUND = {("post", "/workspaces/{workspace}/operations/{name}/try")}


async def _document(client: Client) -> dict[str, Any]:
    response = await client.get(f"{API}/schema/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _admin_operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path.removeprefix(API), operation


async def test_every_admin_route_documents_its_errors_as_the_error_body(client: Client) -> None:
    document = await _document(client)
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    for method, path, operation in _admin_operations(document):
        responses = operation["responses"]
        assert {"400", "401"} <= set(responses), (method, path)
        if path.startswith("/workspaces/{workspace}"):
            assert "404" in responses, (method, path)
        for status, response in responses.items():
            if status.startswith("4"):
                assert response["content"]["application/json"]["schema"] == error_body
    schema = document["components"]["schemas"]["ErrorBody"]
    assert set(schema["required"]) == {"code", "message"}
    assert set(schema["properties"]) == {"code", "message", "errors", "findings"}


async def test_writes_based_on_an_etag_require_if_match_and_document_428_and_409(
    client: Client,
) -> None:
    document = await _document(client)
    writes = 0
    for method, path, operation in _admin_operations(document):
        headers = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "header"}
        if "If-Match" not in headers:
            assert "428" not in operation["responses"], (method, path)
            continue
        writes += 1
        assert headers["If-Match"]["required"] is True
        assert headers["If-Match"]["schema"]["pattern"] == ETAG_PATTERN
        assert {"409", "428"} <= set(operation["responses"]), (method, path)
    # operations: 4, agents: replace, publish, unpublish, delete; egress: 2;
    # identity providers: replace, delete
    assert writes == 12


async def test_reads_and_writes_that_send_an_etag_document_the_header(client: Client) -> None:
    document = await _document(client)
    read = document["paths"][f"{API}/workspaces/{{workspace}}/operations/{{name}}"]["get"]
    assert read["responses"]["200"]["headers"]["ETag"]["schema"]["pattern"] == ETAG_PATTERN
    publish = document["paths"][f"{API}/workspaces/{{workspace}}/operations/{{name}}/publish"]
    for status in ("200", "201"):
        assert "ETag" in publish["post"]["responses"][status]["headers"]


async def test_export_documents_the_file_as_json_and_yaml(client: Client) -> None:
    document = await _document(client)
    export = document["paths"][f"{API}/workspaces/{{workspace}}/export"]["get"]
    content = export["responses"]["200"]["content"]
    file_schema = {"$ref": "#/components/schemas/CrankFile"}
    assert content == {
        "application/json": {"schema": file_schema},
        "application/yaml": {"schema": file_schema},
    }


async def test_constraints_in_the_document_are_the_validators_own(client: Client) -> None:
    document = await _document(client)
    schemas = document["components"]["schemas"]
    assert schemas["OperationSpec"]["properties"]["name"]["pattern"] == anchored(TOOL_NAME)
    assert schemas["AgentSpec"]["properties"]["slug"]["pattern"] == anchored(SLUG)
    assert schemas["WebhookSpec"]["properties"]["format"]["enum"] == list(WEBHOOK_FORMATS)
    pattern = re.compile(anchored(TOOL_NAME))
    for name in ("get_order", "a", "x" * 64, "x" * 65, "bad name", "", "dé"):
        assert bool(pattern.search(name)) == bool(TOOL_NAME.fullmatch(name)), name
    workspace = document["paths"][f"{API}/workspaces/{{workspace}}"]["get"]["parameters"][0]
    assert workspace["schema"]["pattern"] == anchored(SLUG)


async def test_every_body_example_decodes_into_its_route_body(app: Litestar) -> None:
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if route.path.startswith(API) and takes_body(handler):
                body_type = handler.parsed_fn_signature.parameters["data"].annotation
                msgspec.convert(BODY_EXAMPLES[body_type].value, body_type)


async def test_every_body_example_is_accepted_by_its_route(
    client: Client, admin_token: str
) -> None:
    document = await _document(client)
    examples = {
        (method, path): operation["requestBody"]["content"]["application/json"]["examples"]
        for method, path, operation in _admin_operations(document)
        if "requestBody" in operation
    }
    assert set(examples) == set(_EXAMPLE_ORDER) | _OUTBOUND
    names = {
        "workspace": "payments",
        "name": "get_order",
        "slug": "support",
        "agent": "support",
        "provider": "corp",
    }
    for method, path in _EXAMPLE_ORDER:
        url = API + path.format(**names)
        headers = auth(admin_token)
        if method == "put" and not path.endswith("/secrets/{name}"):
            resource = url.rsplit("/", 1)[0] if "/egress/" in url else url
            headers = auth(
                admin_token, (await client.get(resource, headers=headers)).headers["etag"]
            )
        body = examples[(method, path)]["valid"]["value"]
        answer = await client.request(method.upper(), url, json=body, headers=headers)
        assert answer.status_code in (200, 201), (method, path, answer.text)


class _Unexampled(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    note: str


def test_an_app_with_a_body_route_without_an_example_refuses_to_start() -> None:
    @post("/workspaces/{workspace:str}/notes", access=Role.EDITOR)
    async def add_note(ws: CurrentWorkspace, data: JSONBody[_Unexampled]) -> None:
        del ws, data

    app = Litestar(
        route_handlers=[Router(API, route_handlers=[add_note])],
        dependencies=dependencies,
        signature_namespace={"Connection": Connection},
    )
    with pytest.raises(ImproperlyConfiguredException, match="no example body for"):
        document_routes(app.routes, under=API)
