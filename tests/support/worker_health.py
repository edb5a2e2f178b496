"""Memory and loop responsiveness of a real server process, as hostile-input tests measure them.

``PeakMemory`` resets the kernel's peak RSS mark of a process (granian's worker:
``processes.largest_descendant``) and reads how far it rose above where it started; ``HealthProbe`` times ``/healthz`` again and again
while a test does something heavy, so a stalled event loop shows as latency.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from tests.support.processes import memory_kib


@dataclass
class PeakMemory:
    """RSS of ``pid`` now, and the most it reached since (VmHWM after a reset)."""

    pid: int
    start_kib: int = 0

    def reset(self) -> None:
        # "5" resets the peak RSS mark (proc(5), clear_refs) to the current RSS.
        with open(f"/proc/{self.pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        self.start_kib = memory_kib(self.pid)[0]

    @property
    def peak_kib(self) -> int:
        return memory_kib(self.pid)[1]

    @property
    def growth_mib(self) -> float:
        """How far the peak rose above the RSS at ``reset``."""
        return (self.peak_kib - self.start_kib) / 1024


@dataclass
class HealthProbe:
    """The latencies of ``/healthz`` requests sent one after another."""

    latencies_s: list[float] = field(default_factory=list)
    failures: int = 0

    @property
    def worst_ms(self) -> float:
        return max(self.latencies_s, default=0.0) * 1000


@asynccontextmanager
async def probing_health(base_url: str, interval_s: float = 0.02) -> AsyncIterator[HealthProbe]:
    """``/healthz`` of ``base_url`` timed every ``interval_s`` while the block runs."""
    probe = HealthProbe()

    async def loop(http: httpx.AsyncClient) -> None:
        while True:
            started = time.perf_counter()
            response = await http.get("/healthz")
            probe.latencies_s.append(time.perf_counter() - started)
            probe.failures += response.status_code != 200
            await asyncio.sleep(interval_s)

    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        await http.get("/healthz")  # the connection is open before timing starts
        task = asyncio.create_task(loop(http))
        try:
            yield probe
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
