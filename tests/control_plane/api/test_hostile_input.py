"""Hostile bodies on the control plane (docs/security.md, "Control plane requests").

The size and memory tests run against a real granian process (the module's
``server``): its app worker's memory is read from /proc while 30 MB uploads
of ``[{},{},...]`` arrive, and ``/healthz`` is timed from a thread meanwhile.
The structural checks run in process, against the run's test database.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import tracemalloc
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpx import Response

from control_plane.cli.client import Client as CliClient
from control_plane.cli.common import CliError
from control_plane.request_checks import MAX_JSON_DEPTH, MAX_JSON_VALUES, json_problem
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.cli import Server, clean_env, crank, run_async
from tests.support.processes import largest_descendant, memory_kib
from tests.support.uploads import empty_objects, upload

HOSTILE_BYTES = 30_000_000
ORDINARY_LIMIT = 1_048_576  # CRANK_MAX_BODY_BYTES's default
# (method, path below the workspace): apply and import take documents, the others ordinary bodies.
BODY_ROUTES = [
    ("POST", "/import/openapi"),
    ("POST", "/apply"),
    ("POST", "/lint"),
    ("POST", "/operations"),
    ("PUT", "/secrets/KEY"),
]
MEMORY_BOUND_KIB = 40 * 1024  # the bug cost +500 MB for 7 MB; the fix costs next to nothing
HEALTHZ_BOUND_S = 1.0


def routes(workspace: str) -> list[tuple[str, str]]:
    base = f"/api/v1/workspaces/{workspace}"
    return [("POST", "/api/v1/workspaces")] + [(m, base + p) for m, p in BODY_ROUTES]


class HealthWatch:
    """Times ``/healthz`` from a thread of its own, so the test's loop cannot skew it."""

    def __init__(self, url: str) -> None:
        self.url = f"{url}/healthz"
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            with self._opener.open(self.url, timeout=30) as response:
                assert response.status == 200
            self.times.append(time.perf_counter() - started)
            time.sleep(0.02)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


@pytest.fixture
def worker(server: Server) -> int:
    """The pid of the granian worker that runs the control plane."""
    return largest_descendant(server.pid)


def viewer_of(server: Server, workspace: str) -> str:
    return run_async(make_token(server.database_url, "viewer", workspace))


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_an_unauthenticated_30_mb_body_gets_401_before_it_is_sent(
    server: Server, workspace: str, chunked: bool
) -> None:
    for method, path in routes(workspace):
        # 64 KiB of the 30 MB, then the client waits: only an answer that needs
        # none of the rest can come back.
        answer = await upload(
            server.url, path, method=method, size=HOSTILE_BYTES, chunked=chunked, send=65_536
        )
        assert (answer.status, answer.body["code"]) == (401, "unauthorized"), (path, answer)
        bogus = await upload(
            server.url,
            path,
            method=method,
            size=HOSTILE_BYTES,
            chunked=chunked,
            send=65_536,
            headers={"Authorization": "Bearer crk_admin_not-a-real-token"},
        )
        assert bogus.status == 401, (path, bogus)


async def test_unauthenticated_30_mb_uploads_move_no_memory_and_healthz_keeps_answering(
    server: Server, workspace: str, worker: int
) -> None:
    rss_before, peak_before = memory_kib(worker)
    with HealthWatch(server.url) as health:
        answers = await asyncio.gather(
            *(
                upload(server.url, path, method=method, size=HOSTILE_BYTES, chunked=chunked)
                for method, path in routes(workspace)
                for chunked in (False, True)
            )
        )
        await asyncio.sleep(0.3)  # a few more health checks once the uploads are refused
    rss_after, peak_after = memory_kib(worker)
    assert {(a.status, a.body["code"]) for a in answers} == {(401, "unauthorized")}
    assert all(a.sent < HOSTILE_BYTES for a in answers), [a.sent for a in answers]
    assert rss_after - rss_before < MEMORY_BOUND_KIB, (rss_before, rss_after)
    assert peak_after - peak_before < MEMORY_BOUND_KIB, (peak_before, peak_after)
    assert health.times, "no health check finished"
    assert max(health.times) < HEALTHZ_BOUND_S, max(health.times)


async def test_an_editors_30_mb_of_empty_objects_is_400_counted_not_decoded(
    server: Server, workspace: str, worker: int
) -> None:
    rss_before, peak_before = memory_kib(worker)
    with HealthWatch(server.url) as health:
        answer = await upload(
            server.url,
            f"/api/v1/workspaces/{workspace}/apply",
            size=HOSTILE_BYTES,
            headers=auth(server.admin_token),
        )
    _, peak_after = memory_kib(worker)
    assert (answer.status, answer.body["code"]) == (400, "validation_failed"), answer
    assert f"more than {MAX_JSON_VALUES} values" in answer.body["message"]
    # The body itself is held (a document route takes 32 MiB), its ten million
    # dictionaries are never made: decoding them would cost over 700 MB.
    assert peak_after - peak_before < 4 * HOSTILE_BYTES // 1024, (rss_before, peak_after)
    assert max(health.times) < HEALTHZ_BOUND_S, max(health.times)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_viewers_oversize_body_is_413_naming_the_limit_and_the_setting(
    server: Server, workspace: str, chunked: bool
) -> None:
    viewer = viewer_of(server, workspace)
    answer = await upload(
        server.url,
        f"/api/v1/workspaces/{workspace}/lint",
        size=2 * ORDINARY_LIMIT,
        chunked=chunked,
        headers=auth(viewer),
    )
    assert (answer.status, answer.body["code"]) == (413, "body_too_large"), answer
    message = answer.body["message"]
    assert f"{ORDINARY_LIMIT} bytes (1 MiB)" in message
    assert "CRANK_MAX_BODY_BYTES" in message
    assert set(answer.body) == {"code", "message"}  # no field errors: the body as a whole


async def test_a_viewer_gets_403_on_a_document_route_before_sending_the_document(
    server: Server, workspace: str
) -> None:
    viewer = viewer_of(server, workspace)
    for path in ("/import/openapi", "/apply"):
        answer = await upload(
            server.url,
            f"/api/v1/workspaces/{workspace}{path}",
            size=HOSTILE_BYTES,
            send=65_536,
            headers=auth(viewer),
        )
        assert (answer.status, answer.body["code"]) == (403, "forbidden"), (path, answer)


async def test_an_editors_document_over_its_limit_is_413_before_it_is_read(
    server: Server, workspace: str
) -> None:
    answer = await upload(
        server.url,
        f"/api/v1/workspaces/{workspace}/import/openapi",
        size=33_554_433,
        send=65_536,
        headers=auth(server.admin_token),
    )
    assert (answer.status, answer.body["code"]) == (413, "body_too_large"), answer
    assert "33554432 bytes (32 MiB)" in answer.body["message"]
    assert "CRANK_MAX_DOCUMENT_BYTES" in answer.body["message"]


def test_crank_reports_the_413_of_an_upload_the_server_stopped_reading(
    server: Server, workspace: str, tmp_path: Path
) -> None:
    document = tmp_path / "huge.json"
    description = "x" * 34_000_000
    document.write_text(f'{{"openapi": "3.0.3", "info": {{"title": "{description}"}}}}')
    env = clean_env(
        CRANK_URL=server.url, CRANK_TOKEN=server.admin_token, CRANK_DATA_DIR=str(tmp_path)
    )
    result = crank("import-openapi", str(document), "--workspace", workspace, env=env)
    assert result.returncode == 2, result
    assert "body_too_large (413)" in result.stderr, result.stderr
    assert "CRANK_MAX_DOCUMENT_BYTES" in result.stderr
    assert "pipe" not in result.stderr.lower()


@pytest.mark.parametrize("mode", ["--publish", "--dry-run"])
def test_crank_apply_of_a_file_over_the_limit_names_the_limit_and_the_setting(
    server: Server, workspace: str, tmp_path: Path, mode: str
) -> None:
    document = tmp_path / "huge.yaml"
    description = "x" * 34_000_000
    document.write_text(
        "operations:\n- name: big\n"
        f"  description: {description}\n"
        "  input: {type: object}\n"
        "  request: {method: GET, url: 'https://api.example.com/big'}\n"
    )
    env = clean_env(
        CRANK_URL=server.url, CRANK_TOKEN=server.admin_token, CRANK_DATA_DIR=str(tmp_path)
    )
    result = crank("apply", "-f", str(document), "--workspace", workspace, mode, env=env)
    assert result.returncode == 2, result
    assert "body_too_large (413)" in result.stderr, result.stderr
    assert "33554432 bytes (32 MiB)" in result.stderr
    assert "CRANK_MAX_DOCUMENT_BYTES" in result.stderr
    assert "pipe" not in result.stderr.lower()


@pytest.fixture
def hang_up_url() -> Iterator[str]:
    """A server that reads a request's head, then closes without an answer."""

    def serve(listener: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                with connection:
                    connection.recv(4096)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        threading.Thread(target=serve, args=(listener,), daemon=True).start()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_the_cli_names_the_limits_when_an_upload_is_cut_without_an_answer(
    hang_up_url: str,
) -> None:
    client = CliClient(hang_up_url, "crk_admin_token")
    with pytest.raises(CliError) as refused_upload:
        client.post("/workspaces/acme/apply", {"description": "x" * 8_000_000})
    message = str(refused_upload.value)
    assert "closed the connection while a 8000018-byte body was being sent" in message
    assert "CRANK_MAX_BODY_BYTES" in message
    assert "CRANK_MAX_DOCUMENT_BYTES" in message


# In process: the structural checks, which run only for an admitted caller.

WS = "/api/v1/workspaces/acme"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    await create_workspace(client, admin_token, "acme")


def json_headers(token: str) -> dict[str, str]:
    return {**auth(token), "Content-Type": "application/json"}


def refused(response: Response) -> str:
    """The message of a 400 validation_failed answer."""
    body = response.json()
    assert (response.status_code, body["code"]) == (400, "validation_failed"), body
    return str(body["message"])


@pytest.mark.usefixtures("acme")
async def test_a_body_with_more_values_than_the_bound_is_400_before_it_is_decoded(
    client: Client, admin_token: str
) -> None:
    values = b"[" + b"0," * MAX_JSON_VALUES + b"0]"
    body = b'{"operations": [], "agents": [], "extra": ' + values + b"}"
    response = await client.post(f"{WS}/apply", content=body, headers=json_headers(admin_token))
    assert f"more than {MAX_JSON_VALUES} values" in refused(response)
    # Commas and brackets inside strings are text, not values.
    text = '{"operations": [], "description": "' + ",[{" * 400_000 + '"}'
    inside = await client.post(f"{WS}/apply", content=text, headers=json_headers(admin_token))
    assert "values" not in inside.text


@pytest.mark.usefixtures("acme")
async def test_a_body_that_is_not_json_is_400_before_its_valid_prefix_is_decoded(
    client: Client, admin_token: str
) -> None:
    body = b"".join(empty_objects(3_000_000))[:-1] + b"x"  # a million dicts, then a typo
    response = await client.post(f"{WS}/apply", content=body, headers=json_headers(admin_token))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "bad_request"
    assert "not valid JSON" in response.json()["message"]


@pytest.mark.usefixtures("acme")
async def test_json_nested_too_deeply_is_400_for_an_admitted_caller(
    client: Client, admin_token: str
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for route in ("/apply", "/lint", "/operations"):
        response = await client.post(
            f"{WS}{route}", content=f'{{"x": {deep}}}', headers=json_headers(admin_token)
        )
        assert "nested more than" in refused(response)
    shallow_but_over = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    response = await client.post(
        f"{WS}/lint", content=shallow_but_over, headers=json_headers(admin_token)
    )
    assert f"nested more than {MAX_JSON_DEPTH} levels deep" in refused(response)


@pytest.mark.usefixtures("acme")
async def test_nul_checks_come_after_the_token_and_still_refuse(
    client: Client, admin_token: str, database_url: str
) -> None:
    viewer = await make_token(database_url, "viewer", "acme")
    nul_body = '{"operations": [{"name": "a\\u0000b"}]}'
    without = await client.post(
        f"{WS}/lint", content=nul_body, headers={"Content-Type": "application/json"}
    )
    assert without.status_code == 401
    assert refused(await client.post(f"{WS}/lint", content=nul_body, headers=json_headers(viewer)))
    assert (await client.get("/api/v1/workspaces/ac%00me")).status_code == 401
    assert refused(await client.get("/api/v1/workspaces/ac%00me", headers=auth(viewer)))
    query = await client.get(f"{WS}/operations?cursor=a%00b", headers=auth(viewer))
    assert refused(query) == "cursor: a NUL character is not allowed here"


def test_the_structural_walk_holds_the_depth_not_the_width() -> None:
    wide = [{"a": ["x"]} for _ in range(50_000)]
    tracemalloc.start()
    try:
        assert json_problem(wide) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, peak  # one iterator per open container, no path per value
    wide[-1]["a"].append("\x00")
    problem = json_problem(wide)
    assert problem is not None
    assert problem.field == "[49999].a[1]"
    too_many = [0] * MAX_JSON_VALUES
    problem = json_problem(too_many)
    assert problem is not None
    assert "more than" in problem.message
