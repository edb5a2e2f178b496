"""A control plane served by granian on a database of its own, for the tests that
talk to it over real HTTP (the ``crank`` command line, the browser)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.migrate import migrate
from tests.support.api import make_token
from tests.support.cli import Server, clean_env, run_async, wait_until_healthy
from tests.support.db import TEST_SECRET_KEY, admin_sql, database_url_for
from tests.support.processes import free_port


@contextmanager
def serve_control_plane(
    pg_server_url: str, log_dir: Path, database: str, **env: str
) -> Iterator[Server]:
    """A control plane served by granian on database ``database`` of its own, with
    ``env`` added to its environment, for the block."""
    admin_sql(pg_server_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    admin_sql(pg_server_url, f"CREATE DATABASE {database}")
    database_url = database_url_for(pg_server_url, database)
    run_async(migrate(database_url))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log_dir / "control-plane.log"
    env = clean_env(
        CRANK_DATABASE_URL=database_url,
        CRANK_SECRET_KEY=TEST_SECRET_KEY,
        CRANK_LOG_LEVEL="warning",
        **env,
    )
    command = [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "control_plane.app:create_app",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_until_healthy(url, process, log)
        token = run_async(make_token(database_url, "admin", name="cli-tests"))
        yield Server(url=url, database_url=database_url, admin_token=token, pid=process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        admin_sql(pg_server_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
