from __future__ import annotations

from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from tests.support.api import Client


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
