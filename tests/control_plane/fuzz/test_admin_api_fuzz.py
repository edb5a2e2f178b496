"""Schemathesis against a control plane over real HTTP: every admin route
answers inside its own OpenAPI document, as every kind of caller
(tests/support/api_fuzz.py; the long run is bench/fuzz_control_plane.py).

Bounded for CI: ``CASES`` per route, caller and mode (positive and negative),
seeded (the same cases every run); the try-it route is left out because it calls the draft's
upstream. Checks: no 5xx, and the status code, content type, response schema
and response headers as documented.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest
import schemathesis

from tests.support.api_fuzz import (
    EXCLUDED,
    ROLES,
    Caller,
    RouteTally,
    Target,
    fuzz_route,
    load_schema,
    make_callers,
    operations,
    route_name,
    run_stateful,
    seed,
)
from tests.support.cli import Server, run_async

READ_PATH = "/api/v1/workspaces/{workspace}/operations/{name}"
CASES = 3  # per route, caller and mode: 50 routes x 5 callers x 2 modes x 3 = 1,500 requests
SEED = 15
_workspaces = itertools.count()


@pytest.fixture(scope="module")
def schema(server: Server) -> Any:
    return load_schema(server.url)


@pytest.fixture
def target(server: Server, schema: Any) -> Target:
    """A workspace of the test's own, seeded: one test's DELETEs leave the next alone."""
    workspace = f"fuzz-{next(_workspaces)}"
    known = seed(server.url, workspace, Caller("admin", server.admin_token), schema)
    return Target(server.url, workspace, known)


def _caller(server: Server, role: str, workspace: str) -> Caller:
    [caller] = run_async(make_callers(server.database_url, server.admin_token, workspace, [role]))
    return caller


def test_only_the_try_it_route_is_left_out(schema: Any) -> None:
    routes = {route_name(operation) for operation in operations(schema)}
    assert set(EXCLUDED) == {
        ("POST", "/api/v1/workspaces/{workspace}/operations/{name}/try"),
    }
    assert not {f"{method} {path}" for method, path in EXCLUDED} & routes
    assert len(routes) == 50


@pytest.mark.parametrize("role", ROLES)
def test_every_route_answers_inside_its_document(
    server: Server, schema: Any, target: Target, role: str
) -> None:
    caller = _caller(server, role, target.workspace)
    tallies: dict[str, RouteTally] = {}
    for operation in operations(schema):
        tally = tallies.setdefault(route_name(operation), RouteTally())
        fuzz_route(operation, target, caller, tally, max_examples=CASES, seed_value=SEED)
    assert all(tally.cases > 0 for tally in tallies.values())
    failures = [f"{route}: {failure}" for route, t in tallies.items() for failure in t.failures]
    assert not failures, "\n".join(failures)


def test_an_answer_the_document_does_not_list_is_a_failure(server: Server, target: Target) -> None:
    """The checks have teeth: with 404 taken out of one route's document, reading
    operations that do not exist is reported."""
    document = httpx.get(f"{server.url}/api/v1/schema/openapi.json", timeout=30).json()
    read = document["paths"][READ_PATH]["get"]
    del read["responses"]["404"]
    schema = schemathesis.openapi.from_dict(document)
    [operation] = [op for op in operations(schema) if route_name(op) == "GET " + READ_PATH]
    tally = RouteTally()
    caller = _caller(server, "owner", target.workspace)
    fuzz_route(operation, target, caller, tally, max_examples=CASES, seed_value=SEED)
    assert tally.statuses[404] > 0
    assert any("Undocumented status code" in failure for failure in tally.failures), tally


def test_stateful_sequences_answer_inside_the_document(
    server: Server, schema: Any, target: Target
) -> None:
    """Schemathesis's state machine: a response's values (names, ids) feed the next request."""
    admin = Caller("admin", server.admin_token)
    failures = run_stateful(schema, target, admin, runs=10, steps=8)
    assert not failures, "\n".join(failures)
