"""FastMCP's OpenAPI proxy of the rates upstream: the competitor in the side-by-side benchmark.

    .venv-bench-fastmcp/bin/python bench/fastmcp_server.py --port P --upstream http://127.0.0.1:U

Runs with the FastMCP venv's python (bench/fastmcp_venv.py), never the
project's: FastMCP is a benchmark-only dependency. It builds a one-operation
OpenAPI document for bench/rates_upstream.py (``GET /v1/latest``, operationId
``latest_rate``, required query parameters ``base`` and ``symbols``), hands it
to ``FastMCP.from_openapi`` with an httpx2 client on ``--upstream`` (FastMCP
4.2.3 takes httpx2; a legacy httpx client is accepted with a deprecation
warning), and serves ``http_app(stateless_http=True, json_response=True)`` at
``/mcp`` under uvicorn: one worker, asyncio loop (as Crank's gateway runs
with the project's lock, which has no uvloop), access log off, log level
warning. Nothing is printed per request.

The tool is ``latest_rate`` with arguments ``{"base": "USD", "symbols": "EUR"}``
(FastMCP names them after the query parameters). Stateless mode needs no
initialize: one POST per tools/call, e.g.

    POST /mcp
    Content-Type: application/json
    Accept: application/json, text/event-stream
    MCP-Protocol-Version: 2025-06-18

    {"jsonrpc":"2.0","id":1,"method":"tools/call",
     "params":{"name":"latest_rate","arguments":{"base":"USD","symbols":"EUR"}}}

answers 200 with a JSON body whose ``result.structuredContent`` is the
upstream's body. bench/fastmcp_smoke.py checks exactly that request.
"""

from __future__ import annotations

import argparse
from typing import Any

import fastmcp
import httpx2
import uvicorn
from fastmcp import FastMCP
from fastmcp.utilities.logging import configure_logging

TOOL = "latest_rate"
ARGUMENTS = {"base": "USD", "symbols": "EUR"}


def openapi_document(upstream: str) -> dict[str, Any]:
    """The rates upstream's one operation, as Crank's bench publishes it."""

    def query(name: str, example: str) -> dict[str, Any]:
        schema = {"type": "string", "example": example}
        return {"name": name, "in": "query", "required": True, "schema": schema}

    rates = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "base": {"type": "string"},
            "date": {"type": "string"},
            "rates": {"type": "object", "additionalProperties": {"type": "number"}},
        },
    }
    operation = {
        "operationId": TOOL,
        "summary": "Latest exchange rate of a base currency against quote currencies.",
        "parameters": [query("base", "USD"), query("symbols", "EUR")],
        "responses": {
            "200": {
                "description": "The rates",
                "content": {"application/json": {"schema": rates}},
            }
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "rates", "version": "1"},
        "servers": [{"url": upstream}],
        "paths": {"/v1/latest": {"get": operation}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:8001")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()

    # FastMCP logs at INFO through rich by default; the bench wants warnings only.
    fastmcp.settings.log_level = "WARNING"
    configure_logging(level="WARNING")
    client = httpx2.AsyncClient(base_url=args.upstream, timeout=30)
    server = FastMCP.from_openapi(openapi_spec=openapi_document(args.upstream), client=client)
    app = server.http_app(stateless_http=True, json_response=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        loop="asyncio",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
