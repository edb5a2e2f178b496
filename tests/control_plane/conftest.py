"""A control plane served by granian on a database of its own, for the test
modules that run the ``crank`` command line against it."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.cli.client import Client
from tests.support.cli import Server, clean_env
from tests.support.control_plane_server import serve_control_plane

_workspaces = itertools.count()


@pytest.fixture(scope="module")
def server(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A control plane on a database of its own, shared by the module's tests."""
    log_dir = tmp_path_factory.mktemp("server")
    with serve_control_plane(pg_server_url, log_dir, f"crank_cli_{os.getpid()}") as served:
        yield served


@pytest.fixture
def workspace(server: Server) -> str:
    """A new workspace on the server, one per test."""
    slug = f"cli-{next(_workspaces)}"
    Client(server.url, server.admin_token).post("/workspaces", {"slug": slug})
    return slug


@pytest.fixture
def cli_env(server: Server, tmp_path: Path) -> dict[str, str]:
    """The environment the ``crank`` command needs to reach the server as its admin."""
    return clean_env(
        CRANK_URL=server.url, CRANK_TOKEN=server.admin_token, CRANK_DATA_DIR=str(tmp_path)
    )
