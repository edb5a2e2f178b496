"""Schemathesis against a control plane served over real HTTP: its own OpenAPI
document generates the requests, and every answer must stay inside it
(docs/admin-api.md, "Fuzzing"). Shared by tests/control_plane/fuzz and
bench/fuzz_control_plane.py.

Every route and method runs as each caller (owner, editor and viewer of the
fuzzed workspace, another workspace's owner, an instance admin), in positive
mode (requests the document allows) and negative mode (requests it forbids).
Path parameters are drawn from the fuzzer's values and the names of resources
that exist (seeded from the document's own body examples), and ``If-Match``
from the fuzzer's value and the resource's current ETag, so the cases reach
past the 404 and the 428. Seeded (the same cases every run), bounded, never shrunk.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import hypothesis
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.api import make_token

API = "/api/v1"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# Routes that call out of the machine: a try-it calls the draft's upstream.
EXCLUDED = {
    ("POST", f"{API}/workspaces/{{workspace}}/operations/{{name}}/try"): (
        "calls the operation's upstream (an outbound request to whatever URL the draft names)"
    ),
}
# The resource whose ETag an If-Match route's write is based on.
_RESOURCE = re.compile(
    r"^(.*/(?:operations/\{name\}|agents/\{slug\}|egress|identity-providers/\{provider\}))"
    r"(?:/.*)?$"
)
OTHER_WORKSPACE = "elsewhere"  # the stranger's: it owns this one, and nothing in the fuzzed one
ROLES = ("owner", "editor", "viewer", "stranger", "admin")
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)


@dataclass(frozen=True)
class Caller:
    role: str  # owner, editor, viewer, stranger (another workspace's owner), admin
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class RouteTally:
    """What one route answered, per status, and the failures of its checks."""

    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


@dataclass
class Target:
    """The server, the fuzzed workspace and the names of what exists in it."""

    base_url: str
    workspace: str
    known: dict[str, list[Any]]


async def make_callers(
    database_url: str, admin_token: str, workspace: str, roles: Iterable[str] = ROLES
) -> list[Caller]:
    """A caller per role; ``stranger`` owns another workspace, ``admin`` is an instance admin."""
    made = []
    for role in roles:
        if role == "admin":
            token = admin_token
        elif role == "stranger":
            token = await make_token(database_url, "owner", OTHER_WORKSPACE, name="fuzz-stranger")
        else:
            token = await make_token(database_url, role, workspace, name=f"fuzz-{role}")
        made.append(Caller(role, token))
    return made


def load_schema(base_url: str) -> Any:
    """The control plane's document, as schemathesis reads it, without the excluded routes."""
    schema: Any = schemathesis.openapi.from_url(f"{base_url}{API}/schema/openapi.json")
    for method, path in EXCLUDED:
        schema = schema.exclude(method=method, path=path)
    return schema


def operations(schema: Any) -> list[Any]:
    """The document's operations, the DELETEs last (the agent's, which takes its keys
    and webhooks along, the very last), so the others find what was seeded."""
    found = [result.ok() for result in schema.get_all_operations()]
    return sorted(
        found,
        key=lambda op: (op.method == "delete", op.path.endswith("/agents/{slug}")),
    )


def route_name(operation: Any) -> str:
    return f"{operation.method.upper()} {operation.path}"


def _body_example(operation: Any) -> Any:
    body = operation.definition.raw.get("requestBody", {})
    return body.get("content", {}).get("application/json", {}).get("examples", {}).get("valid")


def seed(base_url: str, workspace: str, admin: Caller, schema: Any) -> dict[str, list[Any]]:
    """Make sure the workspace holds, from the document's body examples, an operation
    (published), an agent, a webhook, a secret and a key; the names that exist.
    Run again, it puts back what a fuzzed DELETE took away."""
    examples = {
        route_name(operation): example["value"]
        for operation in operations(schema)
        if (example := _body_example(operation)) is not None
    }
    base = f"{base_url}{API}/workspaces/{workspace}"
    with httpx.Client(headers=admin.headers, timeout=30) as client:

        def ensure(path: str, body: Any) -> httpx.Response:
            answer = client.post(path, json=body)
            assert answer.status_code in (201, 409), f"{path}: {answer.status_code} {answer.text}"
            return answer

        for slug in (workspace, OTHER_WORKSPACE):
            ensure(f"{base_url}{API}/workspaces", {"slug": slug})
        operation = examples[f"POST {API}/workspaces/{{workspace}}/operations"]
        name = operation["name"]
        ensure(f"{base}/operations", operation)
        etag = client.get(f"{base}/operations/{name}").headers["etag"]
        published = client.post(f"{base}/operations/{name}/publish", headers={"If-Match": etag})
        assert published.status_code in (200, 201), published.text
        agent = examples[f"POST {API}/workspaces/{{workspace}}/agents"]
        slug = agent["slug"]
        ensure(f"{base}/agents", agent)
        webhook = examples[f"POST {API}/workspaces/{{workspace}}/agents/{{agent}}/webhooks"]
        webhooks = f"{base}/agents/{slug}/webhooks"
        webhook_id = _live_id(client.get(webhooks)) or ensure(webhooks, webhook).json()["id"]
        keys = f"{base}/keys"
        key_id = _live_id(client.get(keys, params={"agent": slug}))
        key_id = key_id or ensure(keys, {"agent": slug}).json()["id"]
        secret = client.put(f"{base}/secrets/token", json={"value": "fuzz"})
        assert secret.status_code in (200, 201), secret.text
        provider = examples[f"POST {API}/workspaces/{{workspace}}/identity-providers"]
        ensure(f"{base}/identity-providers", provider)
    return {
        "provider": [provider["name"]],
        "name": [name, "token"],
        "slug": [slug],
        "agent": [slug],
        "version": [1],
        "webhook_id": [webhook_id],
        "key_id": [key_id],
    }


def _live_id(listing: httpx.Response) -> Any:
    """The id of the first item of a listing not revoked yet (None: there is none)."""
    assert listing.status_code == 200, listing.text
    live = [item["id"] for item in listing.json()["items"] if not item.get("revoked_at")]
    return live[0] if live else None


def _current_etag(client: requests.Session, target: Target, caller: Caller, case: Any) -> str:
    """The ETag of the resource the case's write is based on, read as the caller."""
    match = _RESOURCE.match(case.path)
    if match is None:
        return ""
    path = match.group(1).format(**case.path_parameters)
    answer = client.get(f"{target.base_url}{path}", headers=caller.headers, timeout=30)
    return str(answer.headers.get("etag", ""))


def _prepare(case: Any, data: st.DataObject, target: Target, caller: Caller, client: Any) -> None:
    """Point the case at the fuzzed workspace and, often, at resources that exist."""
    if case.path_parameters is not None and "workspace" in case.path_parameters:
        case.path_parameters["workspace"] = target.workspace
    for name, values in target.known.items():
        if case.path_parameters and name in case.path_parameters:
            choices = [case.path_parameters[name], *values]
            case.path_parameters[name] = data.draw(st.sampled_from(choices), label=name)
    headers = case.headers or {}
    if "If-Match" in headers and data.draw(st.booleans(), label="current ETag"):
        etag = _current_etag(client, target, caller, case)
        if etag:
            headers["If-Match"] = etag
    if isinstance(case.body, dict) and "url" in case.body and "import" in case.path:
        case.body.pop("url")  # an import would fetch it: loopback only (no outbound calls)


def fuzz_route(
    operation: Any,
    target: Target,
    caller: Caller,
    tally: RouteTally,
    *,
    max_examples: int,
    seed_value: int,
) -> None:
    """``max_examples`` cases per mode of one route as one caller, into ``tally``."""
    session = requests.Session()
    for mode in MODES:
        _fuzz_mode(operation, mode, target, caller, tally, session, max_examples, seed_value)


def _fuzz_mode(
    operation: Any,
    mode: schemathesis.GenerationMode,
    target: Target,
    caller: Caller,
    tally: RouteTally,
    session: requests.Session,
    max_examples: int,
    seed_value: int,
) -> None:
    label = f"[{caller.role}, {mode.value}]"

    @hypothesis.settings(
        max_examples=max_examples,
        database=None,  # with the seed below: the same cases every run
        deadline=None,
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.seed(seed_value)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode), data=st.data())
    def run(case: Any, data: st.DataObject) -> None:
        _prepare(case, data, target, caller, session)
        response = case.call(base_url=target.base_url, headers=caller.headers, session=session)
        tally.cases += 1
        tally.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except (Failure, FailureGroup) as exc:
            tally.failures.append(f"{label} {_describe(exc, case)}")

    run()


def _describe(exc: BaseException, case: Any) -> str:
    failures: list[Any] = list(exc.exceptions) if isinstance(exc, FailureGroup) else [exc]
    titles = "; ".join(f"{f.title}: {f.message}".strip()[:300] for f in failures)
    return f"{titles} <- {case.as_curl_command()[:400]}"


def stateful_machine(schema: Any, target: Target, admin: Caller, failures: list[str]) -> type[Any]:
    """Schemathesis's state machine over the document's links (inferred from the
    operations' bodies and parameters), as an instance admin, each run in a new
    workspace: a run that found another run's leftovers would take other paths
    on a replay, which Hypothesis refuses as flaky. Failures go to ``failures``
    rather than stopping the run, for the same reason."""
    base: Any = schema.as_state_machine()
    runs = itertools.count()

    class Machine(base):  # type: ignore[misc]
        def setup(self) -> None:
            self.workspace = f"{target.workspace}-s{next(runs)}"
            made = httpx.post(
                f"{target.base_url}{API}/workspaces",
                json={"slug": self.workspace},
                headers=admin.headers,
                timeout=30,
            )
            assert made.status_code == 201, made.text

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            if case.path_parameters and "workspace" in case.path_parameters:
                case.path_parameters["workspace"] = self.workspace
            if isinstance(case.body, dict) and "import" in case.path:
                case.body.pop("url", None)
            return {"base_url": target.base_url, "headers": admin.headers}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            try:
                case.validate_response(response, checks=CHECKS)
            except (Failure, FailureGroup) as exc:
                failures.append(f"[{admin.role}, stateful] {_describe(exc, case)}")

    return Machine


def run_stateful(schema: Any, target: Target, admin: Caller, runs: int, steps: int) -> list[str]:
    """``runs`` sequences of up to ``steps`` linked requests, seeded; their failures."""
    failures: list[str] = []
    stateful_machine(schema, target, admin, failures).run(
        settings=hypothesis.settings(
            max_examples=runs,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[hypothesis.Phase.generate],
            suppress_health_check=list(hypothesis.HealthCheck),
            stateful_step_count=steps,
        )
    )
    return failures


def summary(tallies: dict[str, RouteTally]) -> Iterator[str]:
    """One line per route: its cases, its statuses, its failures."""
    for route, tally in sorted(tallies.items()):
        statuses = " ".join(f"{code}:{count}" for code, count in sorted(tally.statuses.items()))
        yield f"{tally.cases:6d}  {len(tally.failures):4d}  {route}  [{statuses}]"
