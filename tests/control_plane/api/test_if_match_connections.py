"""A write refused for its ``If-Match`` (428) gives back the database connection
its request took: a burst of them once emptied the pool, and every later
request of the control plane waited for a connection that never came back
(control_plane.deps.provide_if_match; found by tests/control_plane/fuzz).

Over real HTTP to granian: in process, the connection is taken without a pause
the refusal could cancel, and the leak does not show."""

from __future__ import annotations

import httpx

from shared.settings import Settings
from tests.support.api import auth
from tests.support.cli import Server
from tests.support.operations import operations_path, order_spec

# Several times the pool: a leak of one connection per few refusals exhausts it.
REFUSALS = 8 * Settings().db_pool_size


def test_a_burst_of_writes_refused_for_if_match_leaves_the_pool_usable(server: Server) -> None:
    headers = auth(server.admin_token)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        made = client.post("/api/v1/workspaces", json={"slug": "if-match"}, headers=headers)
        assert made.status_code == 201, made.text
        created = client.post(operations_path("if-match"), json=order_spec(), headers=headers)
        assert created.status_code == 201, created.text
        publish = f"{operations_path('if-match', 'get_order')}/publish"
        answers = [
            client.post(publish, headers=auth(server.admin_token, etag))
            for etag in (None, "not-an-etag")
            for _ in range(REFUSALS)
        ]
        codes = {(answer.status_code, answer.json()["code"]) for answer in answers}
        assert codes == {(428, "if_match_required")}
        read = client.get(operations_path("if-match", "get_order"), headers=headers)
        assert read.status_code == 200
