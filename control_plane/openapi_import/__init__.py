"""OpenAPI import: an OpenAPI 3.0/3.1 or Swagger 2.0 document → draft operations.

Pure functions over the document (no database); ``control_plane.services.imports``
writes the result into a workspace's drafts. Modules, in the order data flows:

- ``load``: text or URL → document, and its version;
- ``filters``: which operations to import (``--include``/``--exclude``);
- ``naming``: tool and argument names;
- ``resolve``: ``$ref`` inlining, ``allOf`` merging, recursion cut, 2020-12 dialect;
- ``request``: parameters and body → arguments and the request mapping;
- ``security``: security schemes → ``request.auth``;
- ``response``: a 2xx JSON schema → suggested ``select`` and ``output_schema``;
- ``convert``: one operation after another → ``ImportResult`` (``report``).
"""

from control_plane.openapi_import.convert import ImportOptions, import_document
from control_plane.openapi_import.load import (
    MAX_DOCUMENT_BYTES,
    SpecError,
    detect_version,
    fetch_document,
    parse_document,
)
from control_plane.openapi_import.report import (
    ImportResult,
    Note,
    SecretNeeded,
    Skipped,
    SourceInfo,
)

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ImportOptions",
    "ImportResult",
    "Note",
    "SecretNeeded",
    "Skipped",
    "SourceInfo",
    "SpecError",
    "detect_version",
    "fetch_document",
    "import_document",
    "parse_document",
]
