"""The client commands' tests: a control plane served by granian for a test
module, the ``crank`` command line run as a process of its own (as CI runs it),
and the crank file they apply."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
START_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 60.0

OPERATIONS_YAML = """\
workspace: {workspace}
operations:
  - name: frankfurter_latest_rate
    title: Latest exchange rate
    description: >-
      Gets the latest exchange rate between two currencies. Use when the user
      asks what one currency is worth in another today.
    input:
      type: object
      properties:
        base:  {{type: string, pattern: "^[A-Z]{{3}}$", description: ISO 4217 code to convert from}}
        quote: {{type: string, pattern: "^[A-Z]{{3}}$", description: ISO 4217 code to convert to}}
      required: [base, quote]
      additionalProperties: false
    request:
      method: GET
      url: https://api.frankfurter.dev/v1/latest
      query: {{base: base, symbols: quote}}
    response:
      select: "{{base: base, date: date, rates: rates}}"
  - name: delete_order
    description: Deletes one order by id. Use when the user asks to cancel an order.
    input:
      type: object
      properties:
        order_id: {{type: string, description: the order}}
      required: [order_id]
    request:
      method: DELETE
      url: https://orders.example/orders/{{order_id}}
    safety:
      confirmation: {confirmation}
agents:
  - slug: currency-rates
    title: Currency rates
    description: Looks up exchange rates.
    operations: [frankfurter_latest_rate, delete_order]
"""


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a thread of its own (the test's loop stays untouched)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result(timeout=30)


def clean_env(**values: str) -> dict[str, str]:
    """The test's environment without any CRANK_*/proxy setting leaking in."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("CRANK_") and "proxy" not in key.lower()
    }
    env.update(values)
    return env


@dataclass(frozen=True)
class Server:
    """The control plane a test module's commands run against."""

    url: str
    database_url: str
    admin_token: str
    pid: int  # the granian process; the app runs in its worker, a child of it


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the control plane exited:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise AssertionError(
        f"the control plane did not start in {START_TIMEOUT_S} s:\n{log.read_text()}"
    )


def crank(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``crank`` command line in a process of its own."""
    command = [
        sys.executable,
        "-c",
        "import sys; from control_plane.cli import main; sys.exit(main())",
    ]
    return subprocess.run(
        [*command, *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
