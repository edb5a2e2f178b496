"""The process's services, started in one order and stopped in the reverse
(docs/architecture.md, "Shutdown").

The app lists each service once, with how it starts and stops; a service
stops only after every service started after it has stopped, so whatever
depends on it (listed later) is gone first. A start that fails stops what
had started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)


async def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    start: Callable[[], Awaitable[object]] = _nothing
    stop: Callable[[], Awaitable[object]] = _nothing


class Services:
    """Starts ``services`` in order; ``stop`` stops the started ones in reverse."""

    def __init__(self, services: list[Service]) -> None:
        self._services = services
        self._started: list[Service] = []

    async def start(self) -> None:
        for service in self._services:
            try:
                await service.start()
            except BaseException:
                await self.stop()
                raise
            self._started.append(service)

    async def stop(self) -> None:
        while self._started:
            service = self._started.pop()
            try:
                await service.stop()
            except Exception:  # the next ones still stop
                log.exception("service_stop_failed", service=service.name)
