"""The OpenAPI importer's pure parts: references, allOf, recursion, names, mappings."""

from __future__ import annotations

from typing import Any

import jmespath
import msgspec
import pytest

from control_plane.openapi_import import (
    ImportOptions,
    ImportResult,
    SpecError,
    import_document,
    parse_document,
)
from control_plane.openapi_import.naming import ArgumentNamer, ToolNamer, snake_case
from control_plane.openapi_import.resolve import SchemaResolver, merge_all_of
from shared.engine.compiler import compile_operation
from shared.engine.request_builder import build_request
from shared.engine.spec import OperationSpec
from shared.engine.spec_validation import validate_operation

BASE = "https://api.example.com/v1"


def document(
    paths: dict[str, Any],
    *,
    schemas: dict[str, Any] | None = None,
    version: str = "3.0.3",
    **extra: Any,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "openapi": version,
        "info": {"title": "Example API", "version": "1.0"},
        "servers": [{"url": BASE}],
        "paths": paths,
        "components": {"schemas": schemas or {}},
    }
    doc.update(extra)
    return doc


def one(doc: dict[str, Any], **options: Any) -> OperationSpec:
    result = import_document(doc, ImportOptions(**options))
    assert not result.skipped, result.skipped
    assert len(result.operations) == 1
    return result.operations[0]


def ok(response: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"200": response or {"description": "OK"}}


def json_body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def notes(result: ImportResult, code: str) -> list[str]:
    return [n.message for n in result.notes if n.code == code]


# -- references, allOf, recursion ---------------------------------------------------


def test_local_refs_are_inlined_and_the_schema_stands_alone() -> None:
    schemas = {
        "Pet": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "owner": {"$ref": "#/components/schemas/Owner"},
            },
        },
        "Owner": {"type": "object", "properties": {"email": {"type": "string"}}},
    }
    doc = document(
        {
            "/pets": {
                "post": {
                    "operationId": "addPet",
                    "requestBody": json_body({"$ref": "#/components/schemas/Pet"}),
                    "responses": ok(),
                }
            }
        },
        schemas=schemas,
    )
    spec = one(doc)
    assert spec.input["properties"]["owner"] == schemas["Owner"]
    assert spec.input["required"] == ["name"]
    assert "$ref" not in str(spec.input)


def test_all_of_is_merged_with_properties_and_required_united() -> None:
    merged = merge_all_of(
        [
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            {"properties": {"name": {"type": "string"}}, "required": ["name"]},
            {"description": "A pet."},
        ]
    )
    assert merged == {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["id", "name"],
        "description": "A pet.",
    }


def test_all_of_with_contradicting_parts_stays_an_all_of() -> None:
    assert merge_all_of([{"type": "string"}, {"type": "integer"}]) is None
    resolver = SchemaResolver({}, openapi_30=True)
    schema, _notes = resolver.schema(
        {"allOf": [{"type": "string"}, {"type": "integer"}]}, "request"
    )
    assert schema == {"allOf": [{"type": "string"}, {"type": "integer"}]}


def test_recursive_schemas_are_cut_where_they_refer_to_themselves() -> None:
    doc = {
        "components": {
            "schemas": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string"},
                        "children": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/Node"},
                        },
                    },
                }
            }
        }
    }
    resolver = SchemaResolver(doc, openapi_30=True)
    schema, cut = resolver.schema({"$ref": "#/components/schemas/Node"}, "request")
    child = schema["properties"]["children"]["items"]
    assert child["type"] == "object"
    assert "properties" not in child
    assert cut == ["recursive schema 'Node' is cut where it refers to itself"]


def test_mutually_recursive_schemas_terminate() -> None:
    doc = {
        "components": {
            "schemas": {
                "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
                "B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}},
            }
        }
    }
    schema, cut = SchemaResolver(doc, openapi_30=True).schema(
        {"$ref": "#/components/schemas/A"}, "request"
    )
    assert schema["properties"]["b"]["properties"]["a"]["type"] == "object"
    assert cut


def test_external_refs_are_never_fetched_but_cut_and_noted() -> None:
    resolver = SchemaResolver({}, openapi_30=True)
    schema, cut = resolver.schema(
        {"type": "object", "properties": {"x": {"$ref": "https://evil.example/schema.json"}}},
        "request",
    )
    assert schema["properties"]["x"] == {}
    assert "never fetched" in cut[0]


def test_an_exponential_document_is_bounded_by_the_node_budget() -> None:
    schemas: dict[str, Any] = {"L0": {"type": "string"}}
    for level in range(1, 30):  # each level refers twice to the one below: 2**29 leaves
        below = {"$ref": f"#/components/schemas/L{level - 1}"}
        schemas[f"L{level}"] = {"type": "object", "properties": {"a": below, "b": below}}
    resolver = SchemaResolver({"components": {"schemas": schemas}}, openapi_30=True)
    schema, cut = resolver.schema({"$ref": "#/components/schemas/L29"}, "request")
    assert schema["type"] == "object"
    assert cut == ["the schema is too large; the rest was left unconstrained"]
    assert len(msgspec.json.encode(schema)) < 1_000_000  # expanded, 2**29 leaves


def test_openapi_30_dialect_becomes_json_schema_2020_12() -> None:
    resolver = SchemaResolver({}, openapi_30=True)
    schema, _notes = resolver.schema(
        {
            "type": "integer",
            "nullable": True,
            "minimum": 1,
            "exclusiveMinimum": True,
            "example": 5,
            "x-internal": "drop me",
            "discriminator": {"propertyName": "kind"},
        },
        "request",
    )
    assert schema == {"type": ["integer", "null"], "exclusiveMinimum": 1, "examples": [5]}


def test_read_only_properties_leave_request_schemas_and_write_only_response_ones() -> None:
    pet = {
        "type": "object",
        "required": ["id", "name"],
        "properties": {
            "id": {"type": "integer", "readOnly": True},
            "name": {"type": "string"},
            "secret": {"type": "string", "writeOnly": True},
        },
    }
    resolver = SchemaResolver({}, openapi_30=True)
    request, _ = resolver.schema(pet, "request")
    response, _ = resolver.schema(pet, "response")
    assert set(request["properties"]) == {"name", "secret"}
    assert request["required"] == ["name"]
    assert set(response["properties"]) == {"id", "name"}


def test_a_regex_re2_cannot_compile_is_dropped_with_a_note_that_says_why() -> None:
    schema, cut = SchemaResolver({}, openapi_30=False).schema(
        {
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^(?!000)\\d{3}$"},
                "name": {"type": "string", "pattern": "^\\p{L}+$"},
            },
            "patternProperties": {"^(a)\\1$": {"type": "string"}, "^x-": {}},
        },
        "request",
    )
    assert schema["properties"]["code"] == {"type": "string"}
    assert schema["properties"]["name"]["pattern"] == "^\\p{L}+$"  # RE2 has \p{L}
    assert list(schema["patternProperties"]) == ["^x-"]
    assert any("'^(?!000)\\\\d{3}$'" in note and "(?!" in note for note in cut)
    assert any("patternProperties" in note and "\\1" in note for note in cut)


# -- names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation_id", "name"),
    [
        ("getPetById", "get_pet_by_id"),
        ("repos/get-content", "repos_get_content"),
        ("getHTTPStatus", "get_http_status"),
        ("get-stations", "get_stations"),
        ("Créer une commande", "creer_une_commande"),
    ],
)
def test_operation_ids_become_snake_case_tool_names(operation_id: str, name: str) -> None:
    assert ToolNamer().name(operation_id, "get", "/x") == name


def test_without_an_operation_id_the_method_and_path_name_the_tool() -> None:
    namer = ToolNamer()
    assert namer.name(None, "get", "/pets/{petId}") == "get_pets_by_pet_id"
    assert namer.name(None, "delete", "/animal/search") == "delete_animal_search"


def test_tool_names_are_unique_and_at_most_64_characters() -> None:
    namer = ToolNamer(prefix="gh")
    long_id = "actions/list-self-hosted-runner-groups-for-an-enterprise-organization-thing"
    first = namer.name(long_id, "get", "/x")
    second = namer.name(long_id, "get", "/y")
    third = namer.name("getPet", "get", "/z")
    fourth = namer.name("get_pet", "get", "/w")
    assert first.startswith("gh_actions_list_self_hosted")
    assert len(first) <= 64
    assert second != first
    assert len(second) <= 64
    assert (third, fourth) == ("gh_get_pet", "gh_get_pet_2")
    assert ToolNamer().name(long_id, "get", "/x") == ToolNamer().name(long_id, "get", "/x")


def test_argument_name_collisions_are_prefixed_with_their_location() -> None:
    names = ArgumentNamer({"_crank_confirmation_token"})
    assert names.claim("id", "path") == "id"
    assert names.claim("id", "query") == "query_id"
    assert names.claim("filter[name]", "query") == "filter_name"
    assert names.claim("_crank_confirmation_token", "query") == "query__crank_confirmation_token"
    assert snake_case("X-Request-ID") == "x_request_id"


def test_path_query_and_body_name_collisions_map_to_the_right_places() -> None:
    doc = document(
        {
            "/items/{id}": {
                "put": {
                    "operationId": "updateItem",
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {"name": "id", "in": "query", "schema": {"type": "integer"}},
                    ],
                    "requestBody": json_body(
                        {
                            "type": "object",
                            "required": ["id"],
                            "properties": {"id": {"type": "string"}, "note": {"type": "string"}},
                        }
                    ),
                    "responses": ok(),
                }
            }
        }
    )
    spec = one(doc)
    assert set(spec.input["properties"]) == {"id", "query_id", "body_id", "note"}
    built = build_request(spec, {"id": "a b", "query_id": 7, "body_id": "B"})
    assert built.url == f"{BASE}/items/a%20b?id=7"
    assert built.body == b'{"id":"B"}'  # the optional note is left out, not sent as null
    compile_operation(spec)


# -- parameters ----------------------------------------------------------------------


def test_path_parameters_with_odd_names_become_identifiers() -> None:
    doc = document(
        {
            "/orgs/{org-name}/items/{item.id}": {
                "get": {
                    "parameters": [
                        {
                            "name": "org-name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "item.id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer"},
                        },
                    ],
                    "responses": ok(),
                }
            }
        }
    )
    spec = one(doc)
    assert spec.request.url == f"{BASE}/orgs/{{org_name}}/items/{{item_id}}"
    assert spec.name == "get_orgs_by_org_name_items_by_item_id"
    assert build_request(spec, {"org_name": "acme", "item_id": 3}).url.endswith("/acme/items/3")


def test_query_arrays_repeat_or_join_as_their_style_says() -> None:
    parameters = [
        {"name": "tag", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
        {
            "name": "ids",
            "in": "query",
            "explode": False,
            "schema": {"type": "array", "items": {"type": "integer"}},
        },
        {"name": "page", "in": "query", "schema": {"type": "integer"}},
    ]
    spec = one(document({"/things": {"get": {"parameters": parameters, "responses": ok()}}}))
    built = build_request(spec, {"tag": ["a", "b"], "ids": [1, 2], "page": 2})
    assert built.url == f"{BASE}/things?tag=a&tag=b&ids=1%2C2&page=2"
    assert build_request(spec, {}).url == f"{BASE}/things"  # nothing given, nothing sent


def test_swagger_collection_formats_map_to_repeat_or_join() -> None:
    doc = {
        "swagger": "2.0",
        "info": {"title": "Old", "version": "1"},
        "host": "old.example",
        "basePath": "/api",
        "schemes": ["https"],
        "paths": {
            "/find": {
                "get": {
                    "parameters": [
                        {
                            "name": "multi",
                            "in": "query",
                            "type": "array",
                            "items": {"type": "string"},
                            "collectionFormat": "multi",
                        },
                        {
                            "name": "pipes",
                            "in": "query",
                            "type": "array",
                            "items": {"type": "string"},
                            "collectionFormat": "pipes",
                        },
                    ],
                    "responses": {"200": {"description": "OK"}},
                }
            }
        },
    }
    spec = one(doc)
    assert spec.request.url == "https://old.example/api/find"
    built = build_request(spec, {"multi": ["a", "b"], "pipes": ["c", "d"]})
    assert built.url.endswith("/find?multi=a&multi=b&pipes=c%7Cd")


def test_header_parameters_become_idempotency_static_dropped_or_a_skip() -> None:
    def operation(*parameters: dict[str, Any]) -> dict[str, Any]:
        return {"post": {"parameters": list(parameters), "responses": ok()}}

    idem = {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}
    version = {
        "name": "X-Api-Version",
        "in": "header",
        "required": True,
        "schema": {"type": "string", "enum": ["2024-01-01"]},
    }
    trace = {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}
    tenant = {"name": "X-Tenant", "in": "header", "required": True, "schema": {"type": "string"}}
    result = import_document(
        document({"/a": operation(idem, version, trace), "/b": operation(tenant)}), ImportOptions()
    )
    [spec] = result.operations
    assert spec.execution_config.idempotency is not None
    assert spec.execution_config.idempotency.header == "Idempotency-Key"
    assert "Idempotency_Key" not in spec.input["properties"]
    argument = spec.execution_config.idempotency.argument
    assert argument in spec.input["required"]
    assert spec.request.headers == {"X-Api-Version": "2024-01-01"}
    assert any("X-Trace" in m for m in notes(result, "parameter_dropped"))
    [skipped] = result.skipped
    assert skipped.where == "POST /b"
    assert "X-Tenant" in skipped.reason
    built = build_request(spec, {argument: "k-1"})
    assert ("Idempotency-Key", "k-1") in built.headers


def test_a_json_body_flattens_into_arguments_and_uses_the_default_mapping() -> None:
    body = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}, "tag": {"type": "string"}},
    }
    spec = one(document({"/pets": {"post": {"requestBody": json_body(body), "responses": ok()}}}))
    assert spec.request.body is None  # the default mapping builds the same body
    assert build_request(spec, {"name": "Rex"}).body == b'{"name":"Rex"}'


def test_a_body_that_is_not_an_object_is_one_argument() -> None:
    body = {"type": "array", "items": {"type": "string"}}
    spec = one(document({"/bulk": {"put": {"requestBody": json_body(body), "responses": ok()}}}))
    assert spec.input["properties"]["body"] == body
    assert spec.request.body == "body"
    assert build_request(spec, {"body": ["a"]}).body == b'["a"]'


def test_renamed_body_fields_get_an_explicit_merge_that_omits_missing_optionals() -> None:
    body = {
        "type": "object",
        "required": ["first-name"],
        "properties": {
            "first-name": {"type": "string"},
            "age": {"type": "integer"},
            "vip": {"type": "boolean"},
        },
    }
    spec = one(document({"/people": {"post": {"requestBody": json_body(body), "responses": ok()}}}))
    assert spec.request.body is not None
    assert spec.request.body.startswith("merge(")
    assert jmespath.search(spec.request.body, {"first_name": "Ann", "vip": False}) == {
        "first-name": "Ann",
        "vip": False,
    }


def test_a_form_body_is_skipped_when_required_and_dropped_when_optional() -> None:
    form = {"content": {"application/x-www-form-urlencoded": {"schema": {"type": "object"}}}}
    result = import_document(
        document(
            {
                "/required": {
                    "post": {"requestBody": {**form, "required": True}, "responses": ok()}
                },
                "/optional": {"post": {"requestBody": form, "responses": ok()}},
            }
        ),
        ImportOptions(),
    )
    assert [s.where for s in result.skipped] == ["POST /required"]
    assert [op.request.url for op in result.operations] == [f"{BASE}/optional"]
    assert notes(result, "body_dropped")


# -- responses, security, safety ------------------------------------------------------


def test_a_json_response_gives_a_select_and_a_matching_output_schema() -> None:
    issue = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "title": {"type": "string"},
            "body": {"type": "string", "nullable": True},
            "labels": {"type": "array", "items": {"type": "string"}},
            "user": {"type": "object", "properties": {"login": {"type": "string"}}},
        },
    }
    response = {"description": "OK", "content": {"application/json": {"schema": issue}}}
    spec = one(
        document(
            {
                "/issues/{n}": {
                    "get": {
                        "parameters": [
                            {
                                "name": "n",
                                "in": "path",
                                "required": True,
                                "schema": {"type": "integer"},
                            }
                        ],
                        "responses": ok(response),
                    }
                }
            }
        )
    )
    assert spec.response.select == "{id: id, title: title, body: body}"
    assert spec.response.output_schema == {
        "type": "object",
        "properties": {
            "id": {"type": ["integer", "null"]},
            "title": {"type": ["string", "null"]},
            "body": {"type": ["string", "null"]},
        },
    }
    assert spec.request.headers == {"Accept": "application/json"}
    upstream = b'{"id": 1, "title": "Bug", "labels": [], "user": {"login": "a"}}'
    selected = compile_operation(spec).select(200, {}, upstream)
    assert selected.value == {"id": 1, "title": "Bug", "body": None}


def test_a_collection_wrapper_keeps_its_items_projected() -> None:
    page = {
        "type": "object",
        "properties": {
            "total_count": {"type": "integer"},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}, "blob": {"type": "object"}},
                },
            },
        },
    }
    response = {"description": "OK", "content": {"application/json": {"schema": page}}}
    spec = one(document({"/search": {"get": {"responses": ok(response)}}}))
    assert spec.response.select == "{total_count: total_count, items: items[*].{id: id}}"


def test_security_schemes_become_auth_naming_a_secret_to_set() -> None:
    schemes = {
        "token": {"type": "http", "scheme": "bearer"},
        "key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        "query_key": {"type": "apiKey", "in": "query", "name": "key"},
        "cookie_key": {"type": "apiKey", "in": "cookie", "name": "sid"},
        "basic": {"type": "http", "scheme": "basic"},
    }
    # The document also declares the query key as a parameter: the auth sends it.
    key_parameter = {"name": "key", "in": "query", "required": True, "schema": {"type": "string"}}
    doc = document(
        {
            "/a": {"get": {"responses": ok()}},
            "/b": {"get": {"security": [{"cookie_key": []}, {"key": []}], "responses": ok()}},
            "/c": {
                "get": {
                    "security": [{"query_key": []}],
                    "parameters": [key_parameter],
                    "responses": ok(),
                }
            },
            "/d": {"get": {"security": [], "responses": ok()}},
            "/e": {"get": {"security": [{"cookie_key": []}], "responses": ok()}},
            "/f": {"get": {"security": [{"key": [], "query_key": []}], "responses": ok()}},
            "/g": {"get": {"security": [{"token": [], "basic": []}], "responses": ok()}},
        },
        security=[{"token": []}],
    )
    doc["components"]["securitySchemes"] = schemes
    result = import_document(doc, ImportOptions(name_prefix="ex"))

    def bound(index: int) -> list[tuple[str, str | None, str | None]]:
        auth = result.operations[index].request.auth
        entries = [] if auth is None else auth if isinstance(auth, list) else [auth]
        return [(a.type, a.name, a.secret) for a in entries]

    assert bound(0) == [("bearer", None, "ex_token")]
    assert bound(1) == [("header", "X-Api-Key", "ex_key")]
    assert bound(2) == [("query", "key", "ex_query_key")]
    assert result.operations[2].input["properties"] == {}
    assert bound(3) == bound(4) == []
    # Both schemes of one requirement are sent, each from its secret.
    assert bound(5) == [("header", "X-Api-Key", "ex_key"), ("query", "key", "ex_query_key")]
    # Two schemes that both need Authorization: the first is sent, the note says so.
    assert bound(6) == [("bearer", None, "ex_token")]
    auth_notes = notes(result, "auth")
    assert any("cookie" in note for note in auth_notes)
    assert any("also requires basic" in note for note in auth_notes)
    assert {(s.name, s.kind, s.operations) for s in result.secrets} == {
        ("ex_token", "bearer", 2),
        ("ex_key", "header", 2),
        ("ex_query_key", "query", 2),
    }


def test_delete_keeps_confirmation_and_post_is_flagged_for_idempotency() -> None:
    doc = document(
        {
            "/x/{id}": {
                "delete": {
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": ok(),
                }
            },
            "/x": {"post": {"responses": ok()}},
        }
    )
    result = import_document(doc, ImportOptions())
    delete, post = result.operations
    assert delete.confirmation_required()
    assert delete.safety.confirmation == "auto"
    assert notes(result, "confirmation")
    assert notes(result, "idempotency")
    assert post.execution_config.idempotency is None


# -- document level ------------------------------------------------------------------


def test_filters_select_by_tag_path_and_operation_id() -> None:
    doc = document(
        {
            "/pets": {"get": {"operationId": "listPets", "tags": ["Pets"], "responses": ok()}},
            "/pets/{id}": {
                "delete": {
                    "operationId": "deletePet",
                    "tags": ["pets"],
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": ok(),
                }
            },
            "/store": {"get": {"operationId": "getStore", "tags": ["store"], "responses": ok()}},
        }
    )

    def names(include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> list[str]:
        result = import_document(doc, ImportOptions(include=include, exclude=exclude))
        return [op.name for op in result.operations]

    assert names(("tag:pets",)) == ["list_pets", "delete_pet"]
    assert names(("tag:pets",), ("operation:delete*",)) == ["list_pets"]
    assert names(("path:/store*",)) == ["get_store"]
    assert names(exclude=("getStore",)) == ["list_pets", "delete_pet"]
    with pytest.raises(SpecError):
        names(("color:red",))


def test_relative_servers_need_a_base_url_or_the_document_url() -> None:
    doc = document({"/pets": {"get": {"responses": ok()}}}, servers=[{"url": "/api/v3"}])
    skipped = import_document(doc, ImportOptions())
    assert "--base-url" in skipped.skipped[0].reason
    spec = one(doc, source_url="http://127.0.0.1:8080/openapi.json")
    assert spec.request.url == "http://127.0.0.1:8080/api/v3/pets"
    assert (
        one(doc, base_url="http://upstream.test/v3/").request.url == "http://upstream.test/v3/pets"
    )


def test_server_variables_take_their_defaults() -> None:
    servers = [
        {
            "url": "{scheme}://{host}/v2",
            "variables": {
                "scheme": {"enum": ["https", "http"]},
                "host": {"default": "api.example.org"},
            },
        }
    ]
    spec = one(document({"/a": {"get": {"responses": ok()}}}, servers=servers))
    assert spec.request.url == "https://api.example.org/v2/a"


def test_openapi_31_types_and_yaml_timestamps_pass_through_as_json() -> None:
    text = """
openapi: 3.1.0
info: {title: Dates, version: "1"}
servers: [{url: "https://dates.example"}]
paths:
  /events:
    get:
      parameters:
        - {name: since, in: query, schema: {type: [string, "null"], examples: [2024-01-01]}}
      responses:
        200: {description: OK}
"""
    spec = one(parse_document(text))
    assert spec.input["properties"]["since"] == {
        "type": ["string", "null"],
        "examples": ["2024-01-01"],
    }


def test_agent_binds_every_imported_operation() -> None:
    doc = document({"/a": {"get": {"responses": ok()}}, "/b": {"get": {"responses": ok()}}})
    result = import_document(doc, ImportOptions(agent="example"))
    assert result.agent is not None
    assert result.agent.operations == ["get_a", "get_b"]
    assert result.agent.title == "Example API"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("not: [valid", "openapi_invalid"),
        ('{"swagger": "1.2"}', "openapi_invalid"),
        ('{"openapi": "4.0.0"}', "openapi_invalid"),
        ("[1, 2]", "openapi_invalid"),
    ],
)
def test_documents_that_are_not_openapi_are_refused(text: str, code: str) -> None:
    with pytest.raises(SpecError) as refused:
        import_document(parse_document(text), ImportOptions())
    assert refused.value.code == code


def test_every_produced_operation_passes_validation() -> None:
    doc = document(
        {
            "/weird/{p}": {
                "get": {
                    "parameters": [
                        {
                            "name": "p",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "boolean"},
                        },
                        {"name": "q", "in": "query", "schema": {"type": "String", "maxLength": -1}},
                        {
                            "name": "obj",
                            "in": "query",
                            "style": "deepObject",
                            "schema": {"type": "object"},
                        },
                    ],
                    "responses": ok(),
                }
            }
        }
    )
    result = import_document(doc, ImportOptions())
    [spec] = result.operations
    assert validate_operation(spec) == []
    assert spec.input["properties"]["p"] == {"type": "string", "enum": ["true", "false"]}
    assert spec.input["properties"]["q"] == {"type": "string"}
    assert "obj" not in spec.input["properties"]


def test_a_yaml_alias_bomb_is_refused_before_anything_walks_it() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(SpecError) as refused:
        parse_document("\n".join(lines))
    assert "expands" in refused.value.message
