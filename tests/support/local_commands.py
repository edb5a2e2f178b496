"""The ``crank`` command run as a process of its own, straight against the
database (``crank tokens``, ``crank migrate``): no control plane involved."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass

from tests.support.db import TEST_SECRET_KEY


@dataclass(frozen=True, slots=True)
class Run:
    code: int
    stdout: str
    stderr: str


async def crank(*args: str, env: dict[str, str]) -> Run:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "control_plane.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return Run(process.returncode, stdout.decode(), stderr.decode())


def crank_env(database_url: str | None, secret_key: str | None = TEST_SECRET_KEY) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    if database_url is not None:
        env["CRANK_DATABASE_URL"] = database_url
    if secret_key is not None:
        env["CRANK_SECRET_KEY"] = secret_key
    return env
