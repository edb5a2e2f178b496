"""What an import produced: operations, and everything a person should read about it.

Wire types (msgspec Structs) because the service returns them in the import
report as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import msgspec

from shared.engine.spec import AgentSpec, OperationSpec

NoteCode = Literal[
    "confirmation",  # DELETE: two-step confirmation applies
    "idempotency",  # POST/PATCH without an idempotency key: set one if repeats duplicate
    "idempotency_configured",  # an Idempotency-Key header parameter became the key
    "parameter_dropped",  # an optional parameter Crank cannot send was left out
    "static_header",  # a required header with one possible value became a static header
    "schema_cut",  # part of a schema was cut (recursion, size, external $ref) or dropped
    "auth",  # about the security scheme mapping
    "body_dropped",  # an optional non-JSON body was left out
    "deprecated",
    "renamed",  # an argument was renamed (invalid identifier or a name collision)
]


class Skipped(msgspec.Struct, kw_only=True, frozen=True):
    """An operation of the document that was not imported, and why."""

    where: str  # "GET /pets/{petId}" (operationId in parentheses when there is one)
    reason: str


class Note(msgspec.Struct, kw_only=True, frozen=True):
    """Something about one imported tool that a person should read; ``code`` says what kind."""

    operation: str  # the tool name
    code: NoteCode
    message: str


class SecretNeeded(msgspec.Struct, kw_only=True, frozen=True):
    """A workspace secret the imported operations send as auth; it still has to be set."""

    name: str  # the workspace secret the operations' request.auth names
    scheme: str  # the security scheme in the document
    kind: str  # bearer, basic, header or query
    description: str  # what to store in it
    operations: int = 0  # how many imported operations use it


class SourceInfo(msgspec.Struct, kw_only=True, frozen=True):
    """The document an import read: its title, versions and operation counts."""

    title: str
    version: str  # the API's own version (info.version)
    openapi: str  # "2.0", "3.0" or "3.1"
    operations_total: int  # operations in the document
    filtered_out: int  # left out by --include/--exclude


@dataclass(slots=True)
class ImportResult:
    """What an import produced: the operations (and agent), and what a person should read."""

    info: SourceInfo
    operations: list[OperationSpec] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    secrets: list[SecretNeeded] = field(default_factory=list)
    agent: AgentSpec | None = None
