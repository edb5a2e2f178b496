"""The admin API's OpenAPI document, kept true to what the routes answer
(docs/architecture.md, "The API document"): the common error responses,
``If-Match`` and the ETag (``routes``), the validators' constraints
(``constraints``) and an example of every request body (``examples``)."""

from control_plane.api_document.constraints import (
    AgentSlugPath,
    OperationNamePath,
    ProviderNamePath,
    SecretNamePath,
    ValidatorConstraints,
    VersionPath,
    constrain,
)
from control_plane.api_document.examples import body_example
from control_plane.api_document.routes import ALSO_AS, ERRORS, document_routes

__all__ = [
    "ALSO_AS",
    "ERRORS",
    "AgentSlugPath",
    "OperationNamePath",
    "ProviderNamePath",
    "SecretNamePath",
    "ValidatorConstraints",
    "VersionPath",
    "body_example",
    "constrain",
    "document_routes",
]
