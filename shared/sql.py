"""Named SQL queries kept in ``.sql`` files (procrastinate style).

A file holds blocks headed by ``-- name: query_name`` lines; everything up to
the next header is that query's text.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, LiteralString]:
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{filename}: query {name!r} is defined twice")
        queries[name] = cast(LiteralString, body.strip())
    return queries
