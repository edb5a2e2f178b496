"""The API docs page (``/api/v1/schema/docs``): Swagger UI served from the
installed ``swagger-ui-py`` package, never a CDN (docs/architecture.md,
"The API docs page").

The page works without internet, and no third-party script runs on the
console's origin, where a same-origin request carries the console cookie.
It carries the console's strict Content-Security-Policy: scripts and styles
from this origin only, so the page starts Swagger UI from a file of its own
(``static/docs.js``) instead of an inline script.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final, NamedTuple

from litestar import Response, Router, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from control_plane.console.rendering import SECURITY_HEADERS

HERE = Path(__file__).parent


def _swagger_ui_dir() -> Path:
    """The package's folder of Swagger UI files, found without importing it (its
    ``__init__`` loads web-framework glue this page has no use for)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("swagger-ui-py is not installed (it is a dependency of crank)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


class Asset(NamedTuple):
    body: bytes
    media_type: str


def _load(path: Path, media_type: str) -> Asset:
    return Asset(path.read_bytes(), media_type)


_SWAGGER_UI = _swagger_ui_dir()
# Read once at import: the only files the page names, and nothing else of the folder.
ASSETS: Final[dict[str, Asset]] = {
    "swagger-ui-bundle.js": _load(_SWAGGER_UI / "swagger-ui-bundle.js", "text/javascript"),
    "swagger-ui.css": _load(_SWAGGER_UI / "swagger-ui.css", "text/css"),
    "docs.js": _load(HERE / "static" / "docs.js", "text/javascript"),
    "docs.css": _load(HERE / "static" / "docs.css", "text/css"),
}
# The assets change only with the package: a browser may keep them an hour.
_ASSET_HEADERS = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=3600"}

_PAGE = b"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Crank control plane API</title>
  <link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="docs/swagger-ui.css">
  <link rel="stylesheet" href="docs/docs.css">
  <script src="docs/swagger-ui-bundle.js" defer></script>
  <script src="docs/docs.js" defer></script>
</head>
<body>
  <main id="swagger-ui" data-document="openapi.json"></main>
</body>
</html>
"""


@get("/docs", include_in_schema=False, sync_to_thread=False)
def docs_page() -> Response[bytes]:
    return Response(_PAGE, media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


@get("/docs/{name:str}", include_in_schema=False, sync_to_thread=False)
def docs_asset(name: FromPath[str]) -> Response[bytes]:
    asset = ASSETS.get(name)
    if asset is None:
        raise NotFoundException(f"no docs file {name!r}")
    return Response(asset.body, media_type=asset.media_type, headers=_ASSET_HEADERS)


def docs_router(schema_path: str) -> Router:
    """The page and its files under ``schema_path`` (public, like the document itself)."""
    return Router(schema_path, route_handlers=[docs_page, docs_asset], include_in_schema=False)
