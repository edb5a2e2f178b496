"""The console's static files: htmx exactly as vendored, nothing fetched from elsewhere."""

from __future__ import annotations

import hashlib
import re

from control_plane.console.router import HERE
from tests.support.api import Client

# htmx 2.0.11's dist/htmx.min.js from npm (control_plane/console/static/htmx.README).
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"


def test_vendored_htmx_is_the_released_file() -> None:
    digest = hashlib.sha256((HERE / "static" / "htmx.min.js").read_bytes()).hexdigest()
    assert digest == HTMX_SHA256
    assert (HERE / "static" / "htmx.LICENSE").read_text().startswith("Zero-Clause BSD")


def test_templates_load_nothing_from_another_origin() -> None:
    external = re.compile(r"""(?:src|href|action)\s*=\s*["'](?:https?:)?//""", re.IGNORECASE)
    inline = re.compile(r"<script(?![^>]*\bsrc=)|<style|\sstyle=|\son[a-z]+=", re.IGNORECASE)
    for template in (HERE / "templates").glob("*.html"):
        text = template.read_text()
        assert not external.search(text), template.name
        assert not inline.search(text), f"{template.name}: inline script or style breaks the CSP"


async def test_static_files_are_served_to_anyone(client: Client) -> None:
    for name, kind in (
        ("htmx.min.js", "javascript"),
        ("console.js", "javascript"),
        ("console.css", "text/css"),
    ):
        answer = await client.get(f"/ui/static/{name}")
        assert answer.status_code == 200, name
        assert kind in answer.headers["content-type"]
    assert (await client.get("/ui/static/../app.py")).status_code == 404
