"""The 2026-07-28 tasks extension (``io.modelcontextprotocol/tasks``) as a client speaks it.

No official SDK speaks the extension's client side in Python (mcp 2.3.0 has no
tasks code for 2026-07-28), so the tests send raw HTTP and check every answer
against a JSON Schema transcribed from the extension's own TypeScript shapes
(modelcontextprotocol/ext-tasks, specification/2026-07-28/tasks.md: ``Task``,
``DetailedTask``, ``CreateTaskResult``, ``GetTaskResult``; docs/dev/mcp-protocol-notes.md).
"""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema

from tests.support.mcp import META, modern, request

EXTENSION = "io.modelcontextprotocol/tasks"
TASKS_META = {
    **META,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
}

_TASK_FIELDS: dict[str, Any] = {
    "taskId": {"type": "string"},
    "statusMessage": {"type": "string"},
    "createdAt": {"type": "string", "format": "date-time"},
    "lastUpdatedAt": {"type": "string", "format": "date-time"},
    "ttlMs": {"type": ["integer", "null"]},
    "pollIntervalMs": {"type": "integer"},
    "_meta": {"type": "object"},
}
_REQUIRED = ["taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"]


def _variant(status: str, *extra: str) -> dict[str, Any]:
    properties = {**_TASK_FIELDS, "status": {"const": status}}
    for field in extra:
        properties[field] = {"type": "object"}
    return {"type": "object", "properties": properties, "required": [*_REQUIRED, *extra]}


# Result & DetailedTask, resultType "complete" (tasks/get).
GET_TASK_RESULT: dict[str, Any] = {
    "allOf": [
        {
            "type": "object",
            "properties": {"resultType": {"const": "complete"}},
            "required": ["resultType"],
        },
        {
            "oneOf": [
                _variant("working"),
                _variant("input_required", "inputRequests"),
                _variant("completed", "result"),
                _variant("failed", "error"),
                _variant("cancelled"),
            ]
        },
    ]
}
# Result & Task, resultType "task" (tools/call).
CREATE_TASK_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        **_TASK_FIELDS,
        "resultType": {"const": "task"},
        "status": {"enum": ["working", "input_required", "completed", "cancelled", "failed"]},
    },
    "required": ["resultType", *_REQUIRED],
}
# Result, an empty acknowledgement (tasks/update, tasks/cancel).
ACK_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {"resultType": {"const": "complete"}, "_meta": {"type": "object"}},
    "required": ["resultType"],
    "additionalProperties": False,
}


def check(value: Any, schema: dict[str, Any]) -> dict[str, Any]:
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    assert isinstance(value, dict)
    return value


async def call_tool(
    http: httpx.AsyncClient, path: str, key: str, name: str, arguments: Any, *, tasks: bool = True
) -> dict[str, Any]:
    """The JSON-RPC message answering a modern tools/call (HTTP 200)."""
    body = request(
        "tools/call", {"name": name, "arguments": arguments}, TASKS_META if tasks else META
    )
    answer = await http.post(
        path, json=body, headers=modern(key, "tools/call", **{"Mcp-Name": name})
    )
    assert answer.status_code == 200, answer.text
    message: dict[str, Any] = answer.json()
    return message


async def task_request(
    http: httpx.AsyncClient, path: str, key: str, method: str, task_id: str, *, tasks: bool = True
) -> httpx.Response:
    """A ``tasks/*`` request as the extension sends it: Mcp-Name repeats ``taskId``."""
    body = request(method, {"taskId": task_id}, TASKS_META if tasks else META)
    return await http.post(path, json=body, headers=modern(key, method, **{"Mcp-Name": task_id}))


async def task_result(
    http: httpx.AsyncClient, path: str, key: str, method: str, task_id: str
) -> dict[str, Any]:
    """The result of a ``tasks/*`` request answered with HTTP 200, checked by its schema."""
    answer = await task_request(http, path, key, method, task_id)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    return check(result, GET_TASK_RESULT if method == "tasks/get" else ACK_RESULT)
