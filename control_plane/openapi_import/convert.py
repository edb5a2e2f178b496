"""One OpenAPI document → ``ImportResult``: draft operations and what was left out.

Pure: no I/O, no database. For each operation of ``paths`` that the filters
select, in document order:

1. name it (``naming.ToolNamer``: operationId or method + path, unique, ≤ 64);
2. find its base URL: ``--base-url`` if given, else the first absolute server
   (operation, then path item, then document; variables at their defaults;
   relative to the document's URL when it came from one); Swagger 2.0 uses
   ``schemes``/``host``/``basePath``;
3. build the arguments and request mapping (``request.build_request``),
   the auth (``security.choose_auth``) and the suggested response selection
   (``response.suggest``);
4. check the result with ``shared.engine.spec_validation.validate_operation``, the
   same check every write runs: an operation that fails it is skipped with the
   reasons, so everything in ``ImportResult.operations`` can be saved.

DELETE keeps ``safety.confirmation: auto`` (confirmation is required, and
cannot be switched off); POST and PATCH without an idempotency key are
flagged in the notes. HEAD, OPTIONS and TRACE are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import msgspec

from control_plane.openapi_import.filters import FilterError, Selection
from control_plane.openapi_import.load import SpecError, Version, detect_version
from control_plane.openapi_import.naming import ToolNamer, snake_case
from control_plane.openapi_import.report import (
    ImportResult,
    Note,
    NoteCode,
    SecretNeeded,
    Skipped,
    SourceInfo,
)
from control_plane.openapi_import.request import (
    Body,
    Parameter,
    Unsupported,
    build_request,
    parse_parameter,
)
from control_plane.openapi_import.resolve import RefError, SchemaResolver
from control_plane.openapi_import.response import is_json_media, suggest
from control_plane.openapi_import.security import AuthChoice, choose_auth, sent_by_auth
from shared.engine.spec import (
    AgentSpec,
    ExecutionConfig,
    HttpMethod,
    OperationSpec,
    RequestSpec,
    ResponseSpec,
)
from shared.engine.spec_validation import validate_operation

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_SUPPORTED: dict[str, HttpMethod] = {
    "get": "GET",
    "put": "PUT",
    "post": "POST",
    "delete": "DELETE",
    "patch": "PATCH",
}
MAX_DESCRIPTION = 1500
MAX_TITLE = 120
_WHITESPACE = re.compile(r"\s+")
_VARIABLE = re.compile(r"\{([^{}]+)\}")
_SUCCESS_ORDER = ("200", "201", "202", "203", "206")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOptions:
    """What an import was asked for: filters, the agent to bind, base URL, tool name prefix."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    agent: str | None = None  # bind the imported operations to this agent (a draft)
    base_url: str | None = None  # replaces the document's servers
    name_prefix: str = ""
    source_url: str | None = None  # where the document came from: base of relative servers


def _text(value: Any) -> str:
    return _WHITESPACE.sub(" ", value).strip() if isinstance(value, str) else ""


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _description(operation: dict[str, Any], method: str, path: str) -> tuple[str | None, str]:
    summary, detail = _text(operation.get("summary")), _text(operation.get("description"))
    if summary and detail and not detail.startswith(summary):
        text = f"{summary.rstrip('.')}. {detail}"
    else:
        text = detail or summary
    title = _shorten(summary, MAX_TITLE) if summary else None
    return title, _shorten(text or f"Calls {method} {path}.", MAX_DESCRIPTION)


def _json(value: Any) -> Any:
    """Plain JSON (what jsonb stores): YAML's integer keys become strings, NaN null."""
    try:
        return msgspec.json.decode(msgspec.json.encode(value))
    except (msgspec.EncodeError, TypeError, ValueError) as exc:
        raise Unsupported(f"a schema holds a value JSON cannot represent: {exc}") from None


class _Converter:
    def __init__(self, document: dict[str, Any], version: Version, options: ImportOptions) -> None:
        self.document = document
        self.version = version
        self.swagger = version == "2.0"
        self.options = options
        self.resolver = SchemaResolver(document, openapi_30=version != "3.1")
        info = document.get("info") if isinstance(document.get("info"), dict) else {}
        self.info: dict[str, Any] = info or {}
        self.title = _text(self.info.get("title")) or "API"
        self.api = snake_case(options.name_prefix) or snake_case(self.title)[:40] or "api"
        if self.swagger:
            schemes = document.get("securityDefinitions")
        else:
            components = document.get("components")
            schemes = components.get("securitySchemes") if isinstance(components, dict) else None
        self.schemes: dict[str, Any] = {}
        for name, scheme in (schemes or {}).items() if isinstance(schemes, dict) else ():
            try:
                self.schemes[str(name)] = self.resolver.follow(scheme)
            except RefError:
                continue

    # -- URLs --------------------------------------------------------------------

    def base_url(self, item: dict[str, Any], operation: dict[str, Any]) -> str | None:
        if self.options.base_url:
            return self.options.base_url.rstrip("/")
        source = self.options.source_url
        if self.swagger:
            host = self.document.get("host")
            base_path = str(self.document.get("basePath") or "").rstrip("/")
            schemes = operation.get("schemes") or self.document.get("schemes") or []
            scheme = "https" if "https" in schemes or not schemes else str(schemes[0])
            if isinstance(host, str) and host:
                return f"{scheme}://{host}{base_path}"
            if source:
                parts = urlsplit(source)
                return f"{parts.scheme}://{parts.netloc}{base_path}"
            return None
        servers = operation.get("servers") or item.get("servers") or self.document.get("servers")
        if not isinstance(servers, list) or not servers:
            servers = [{"url": "/"}]
        for server in servers:
            if not isinstance(server, dict) or not isinstance(server.get("url"), str):
                continue
            url = self._expand(server["url"], server.get("variables"))
            if source and not url.startswith(("http://", "https://")):
                url = urljoin(source, url)
            if url.startswith(("http://", "https://")) and "{" not in url:
                return url.rstrip("/")
        return None

    @staticmethod
    def _expand(url: str, variables: Any) -> str:
        def value(match: re.Match[str]) -> str:
            variable = variables.get(match.group(1)) if isinstance(variables, dict) else None
            if isinstance(variable, dict):
                default = variable.get("default")
                if default is None and isinstance(variable.get("enum"), list):
                    default = (variable["enum"] or [None])[0]
                if default is not None:
                    return str(default)
            return match.group(0)

        return _VARIABLE.sub(value, url)

    # -- parameters and bodies ---------------------------------------------------

    def raw_parameters(self, item: dict[str, Any], operation: dict[str, Any]) -> list[Any]:
        """Path-item parameters overridden by the operation's (same name and location)."""
        merged: dict[tuple[str, str], Any] = {}
        for source in (item.get("parameters"), operation.get("parameters")):
            for raw in source if isinstance(source, list) else []:
                parameter = self.resolver.follow(raw)
                if isinstance(parameter, dict):
                    key = (str(parameter.get("name")), str(parameter.get("in")))
                    merged[key] = parameter
        return list(merged.values())

    def body(self, operation: dict[str, Any], raw: list[Any]) -> Body | None:
        if self.swagger:
            consumes = operation.get("consumes") or self.document.get("consumes") or []
            media = tuple(str(m) for m in consumes) if isinstance(consumes, list) else ()
            json_ok = not media or any(is_json_media(m) for m in media)
            form = [p for p in raw if p.get("in") == "formData"]
            for parameter in raw:
                if parameter.get("in") == "body":
                    name = str(parameter.get("name") or "body")
                    required = parameter.get("required") is True
                    if not json_ok:
                        return Body(None, required, media=media)
                    return Body(parameter.get("schema") or {}, required, name)
            if form:
                required = any(p.get("required") is True for p in form)
                return Body(None, required, media=media or ("application/x-www-form-urlencoded",))
            return None
        request_body = self.resolver.follow(operation.get("requestBody"))
        if not isinstance(request_body, dict):
            return None
        required = request_body.get("required") is True
        content = request_body.get("content")
        if not isinstance(content, dict) or not content:
            return None
        media_types = [str(m) for m in content]
        chosen = next(
            (m for m in media_types if m.split(";")[0].strip() == "application/json"), None
        )
        chosen = chosen or next((m for m in media_types if is_json_media(m)), None)
        if chosen is None:
            return Body(None, required, media=tuple(media_types))
        entry = content[chosen] if isinstance(content[chosen], dict) else {}
        body_name = operation.get("x-codegen-request-body-name")
        return Body(entry.get("schema") or {}, required, str(body_name) if body_name else "body")

    # -- responses ---------------------------------------------------------------

    def success_schema(self, operation: dict[str, Any]) -> tuple[str, Any] | None:
        """(media type, schema) of the first 2xx response with a JSON body."""
        responses = operation.get("responses")
        if not isinstance(responses, dict):
            return None
        codes = {str(code): value for code, value in responses.items()}
        order = [c for c in _SUCCESS_ORDER if c in codes]
        order += sorted(c for c in codes if c.startswith("2") and c not in order)
        for code in order:
            response = self.resolver.follow(codes[code])
            if not isinstance(response, dict):
                continue
            if self.swagger:
                produces = operation.get("produces") or self.document.get("produces") or []
                media = [str(m) for m in produces] if isinstance(produces, list) else []
                if "schema" in response and (not media or any(map(is_json_media, media))):
                    json_media = next((m for m in media if is_json_media(m)), "application/json")
                    return json_media, response["schema"]
                continue
            content = response.get("content")
            if isinstance(content, dict):
                for media_type, entry in content.items():
                    json_body = is_json_media(str(media_type)) and isinstance(entry, dict)
                    if json_body and "schema" in entry:
                        return str(media_type), entry["schema"]
        return None

    # -- one operation -------------------------------------------------------------

    def operation(
        self, name: str, method: str, path: str, item: dict[str, Any], operation: dict[str, Any]
    ) -> tuple[OperationSpec, list[tuple[NoteCode, str]], AuthChoice]:
        upper = method.upper()
        base = self.base_url(item, operation)
        if base is None:
            raise Unsupported(
                "the document gives no absolute server URL; import with a base URL (--base-url)"
            )
        raw = self.raw_parameters(item, operation)
        requirements = operation.get("security", self.document.get("security"))
        auth = choose_auth(requirements, self.schemes, self.api)
        parameters = [
            p
            for p in (parse_parameter(r, swagger=self.swagger) for r in raw)
            if isinstance(p, Parameter) and not sent_by_auth(p.location, p.name, auth)
        ]
        parts = build_request(upper, path, parameters, self.body(operation, raw), self.resolver)
        notes = list(parts.notes)
        notes += [("auth", message) for message in auth.notes]

        headers = dict(parts.headers)
        select: str | None = None
        output: dict[str, Any] | None = None
        success = self.success_schema(operation)
        if success is not None:
            media, schema = success
            converted, _cuts = self.resolver.schema(schema, "response")
            select, output = suggest(converted)
            if not any(h.lower() == "accept" for h in headers):
                headers["Accept"] = media if "*" not in media else "application/json"
        title, description = _description(operation, upper, path)
        if operation.get("deprecated") is True:
            notes.append(("deprecated", "the document marks this operation deprecated"))
        if upper == "DELETE":
            notes.append(("confirmation", "DELETE: two-step confirmation is required"))
        elif upper in ("POST", "PATCH") and parts.idempotency is None:
            notes.append(
                (
                    "idempotency",
                    f"{upper} without an idempotency key: if a repeated call could create a "
                    "duplicate, set execution_config.idempotency",
                )
            )
        spec = OperationSpec(
            name=name,
            title=title,
            description=description,
            input=_json(parts.input_schema()),
            request=RequestSpec(
                method=_SUPPORTED[method],
                url=base + parts.path,
                query=parts.query or None,
                headers=headers or None,
                body=parts.body,
                auth=auth.auth,
            ),
            response=ResponseSpec(
                select=select, output_schema=None if output is None else _json(output)
            ),
            execution_config=ExecutionConfig(idempotency=parts.idempotency),
        )
        return spec, notes, auth


def _agent(options: ImportOptions, info: dict[str, Any], title: str, names: list[str]) -> AgentSpec:
    assert options.agent is not None
    described = _text(info.get("description")).split(". ")[0].rstrip(".")
    description = _shorten(described, 300) + "." if described else f"Tools of {title}."
    return AgentSpec(
        slug=options.agent,
        title=_shorten(title, MAX_TITLE),
        description=description,
        operations=names,
    )


def import_document(
    document: dict[str, Any], options: ImportOptions, *, validate: bool = True
) -> ImportResult:
    """Convert ``document``; raises ``SpecError`` when it is not usable at all.

    ``validate=False`` leaves ``validate_operation`` to the caller (the import
    service lets the operations service validate each spec once, as it saves).
    """
    version = detect_version(document)
    try:
        selection = Selection.parse(list(options.include), list(options.exclude))
    except FilterError as exc:
        raise SpecError(str(exc), code="bad_request") from None
    converter = _Converter(document, version, options)
    namer = ToolNamer(options.name_prefix)
    paths = document.get("paths")
    operations: list[OperationSpec] = []
    skipped: list[Skipped] = []
    notes: list[Note] = []
    secrets: dict[str, SecretNeeded] = {}
    total = filtered = 0
    for path, raw_item in (paths if isinstance(paths, dict) else {}).items():
        try:
            item = converter.resolver.follow(raw_item)
        except RefError as exc:
            skipped.append(Skipped(where=str(path), reason=str(exc)))
            continue
        if not isinstance(item, dict):
            continue
        for method in METHODS:
            operation = item.get(method)
            if not isinstance(operation, dict):
                continue
            total += 1
            operation_id = operation.get("operationId")
            operation_id = operation_id if isinstance(operation_id, str) else None
            tags = [t for t in operation.get("tags") or [] if isinstance(t, str)]
            where = f"{method.upper()} {path}" + (f" ({operation_id})" if operation_id else "")
            if not selection.wants(tags=tags, path=str(path), operation_id=operation_id):
                filtered += 1
                continue
            if method not in _SUPPORTED:
                skipped.append(Skipped(where=where, reason=f"{method.upper()} is not supported"))
                continue
            name = namer.name(operation_id, method, str(path))
            try:
                spec, op_notes, auth = converter.operation(name, method, str(path), item, operation)
            except (Unsupported, RefError) as exc:
                skipped.append(Skipped(where=where, reason=str(exc)))
                continue
            errors = validate_operation(spec) if validate else []
            if errors:
                reason = "; ".join(f"{e.field}: {e.message}" for e in errors[:3])
                skipped.append(Skipped(where=where, reason=f"not a valid operation: {reason}"))
                continue
            operations.append(spec)
            notes += [
                Note(operation=name, code=code, message=message) for code, message in op_notes
            ]
            for binding in auth.bindings:
                secret = binding.auth.secret_names()[0]  # the importer binds one secret each
                known = secrets.get(secret)
                secrets[secret] = SecretNeeded(
                    name=secret,
                    scheme=binding.scheme,
                    kind=binding.auth.type,
                    description=binding.description,
                    operations=(known.operations if known else 0) + 1,
                )
    info = SourceInfo(
        title=converter.title,
        version=str(converter.info.get("version") or ""),
        openapi=version,
        operations_total=total,
        filtered_out=filtered,
    )
    result = ImportResult(
        info=info,
        operations=operations,
        skipped=skipped,
        notes=notes,
        secrets=list(secrets.values()),
    )
    if options.agent:
        result.agent = _agent(
            options, converter.info, converter.title, [op.name for op in operations]
        )
    return result
