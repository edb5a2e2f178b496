"""The console's router under ``/ui``, its templates and its static files."""

from __future__ import annotations

from pathlib import Path

from litestar import Router
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from control_plane.console.errors import exception_handlers
from control_plane.console.guard import CONSOLE
from control_plane.console.pages import route_handlers

PREFIX = "/ui"
HERE = Path(__file__).parent
STATIC_PATH = f"{PREFIX}/static"
SIGN_IN_PATHS = (f"{PREFIX}/sign-in", STATIC_PATH)  # reachable without a session

template_config = TemplateConfig(directory=HERE / "templates", engine=JinjaTemplateEngine)

console_router = Router(
    PREFIX,
    route_handlers=[
        *route_handlers,
        create_static_files_router(
            path="/static",
            directories=[HERE / "static"],
            include_in_schema=False,
            opt={CONSOLE: True},
        ),
    ],
    opt={CONSOLE: True},
    include_in_schema=False,
    exception_handlers=exception_handlers,
)
