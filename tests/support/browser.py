"""A real headless browser for the console and approver-inbox tests: Debian's
chromium driven by Playwright, axe-core injected into each page checked, and a
screenshot of every checked page at a desktop and a phone width.

Chromium comes from the system (``apt-get install chromium``; .ci/run installs
it): Playwright's own browser download is not used. Without it the browser
tests skip, naming the reason. Screenshots go to ``test-artifacts/screens``
(``CRANK_TEST_ARTIFACTS`` moves the folder).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, ViewportSize, async_playwright

from tests.support.js import require_node22
from tests.support.paths import JS_DIR, REPOSITORY_DIR

CHROMIUM = Path("/usr/bin/chromium")
AXE = JS_DIR / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
WIDTHS = {"desktop": DESKTOP, "phone": PHONE}
# Impacts axe-core ranks at or above "serious"; the issue allows none of them.
BLOCKING_IMPACTS = {"serious", "critical"}


def artifacts_dir() -> Path:
    root = Path(os.environ.get("CRANK_TEST_ARTIFACTS") or REPOSITORY_DIR / "test-artifacts")
    folder = root / "screens"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def require_chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); "
            ".ci/run installs it"
        )
    return CHROMIUM


@functools.cache
def _axe_source() -> str:
    require_node22()  # installs tests/js (axe-core among its packages) on first use
    return AXE.read_text()


@asynccontextmanager
async def launch_browser() -> AsyncIterator[Browser]:
    executable = require_chromium()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(executable),
            headless=True,
            # Root in a container has no user namespace for chromium's sandbox.
            args=["--no-sandbox"] if os.geteuid() == 0 else [],
        )
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def browser_page(browser: Browser, *, phone: bool = False) -> AsyncIterator[Page]:
    """A page in a fresh context (its own cookies) that fails the test on a page error,
    a console error (a Content-Security-Policy violation is one) or a failed request."""
    context: BrowserContext = await browser.new_context(viewport=PHONE if phone else DESKTOP)
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type == "error" and not _expected_console_error(message.text)
            else None
        ),
    )
    try:
        yield page
    finally:
        await context.close()
    assert not problems, "the browser reported:\n" + "\n".join(problems)


def _expected_console_error(text: str) -> bool:
    """Chromium logs every 4xx answer as a console error; those are asserted by the tests."""
    return bool(
        re.search(r"Failed to load resource: the server responded with a status of 4", text)
    )


async def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page as it is now.

    Injected with ``evaluate`` (the DevTools protocol), which the page's strict
    Content-Security-Policy does not govern, so the page's own policy stays on."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        await page.evaluate(_axe_source())
    result: dict[str, Any] = await page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [v for v in result["violations"] if v.get("impact") in BLOCKING_IMPACTS]


def describe(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + ", ".join(str(node.get("target")) for node in v.get("nodes", [])[:5])
        for v in violations
    )


async def check_page(page: Page, name: str) -> None:
    """Screenshots of the page at both widths, and no serious axe-core violation at either."""
    viewport = page.viewport_size
    for width_name, size in WIDTHS.items():
        await page.set_viewport_size(size)
        await page.screenshot(
            path=str(artifacts_dir() / f"{name}-{width_name}.png"), full_page=True
        )
        violations = await axe_violations(page)
        assert not violations, f"{name} at {width_name} width:\n{describe(violations)}"
    if viewport is not None:
        await page.set_viewport_size(viewport)
