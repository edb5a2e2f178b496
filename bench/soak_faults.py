"""The soak's fault schedule: what breaks when, spaced through the run, and the
windows each fault actually lasted (for the ledger's attribution).

The schedule is fractions of ``--duration`` so a short CI run keeps every fault,
each compressed (never shorter than a few seconds). The last fifth of the run
has no fault, so the end of the run shows whether the system came back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

# name, start (fraction of the run), length (fraction of the run), shortest length (s)
PLAN: tuple[tuple[str, float, float, float], ...] = (
    ("upstream slow", 0.08, 0.05, 4.0),
    ("replica killed", 0.17, 0.0, 0.0),  # SIGKILL, then a restart once it is down
    ("upstream 500 storm", 0.27, 0.04, 3.0),
    ("database restart", 0.37, 0.0, 0.0),  # stop, stay down DB_DOWN_S, start
    ("upstream refused", 0.47, 0.04, 3.0),
    ("upstream 429 storm", 0.57, 0.04, 3.0),
    ("upstream reset", 0.67, 0.05, 4.0),
)
UPSTREAM_MODES = {
    "upstream slow": "slow",
    "upstream 500 storm": "500",
    "upstream refused": "refused",
    "upstream 429 storm": "429",
    "upstream reset": "reset",
}
REPLICA_DOWN_S = 3.0  # between the SIGKILL and the restart
DB_DOWN_S = 6.0  # PostgreSQL stays stopped this long


class Cluster(Protocol):
    def now(self) -> float: ...
    async def kill_replica(self) -> None: ...
    async def start_killed_replica(self) -> None: ...
    async def stop_database(self) -> None: ...
    async def start_database(self) -> None: ...
    async def set_upstream_fault(self, mode: str) -> None: ...


@dataclass
class Window:
    name: str
    start: float  # seconds since the run started
    end: float = -1.0  # -1 while it lasts

    def covers(self, at: float, recovery_s: float, until: float | None = None) -> bool:
        """Whether [``at``, ``until``] meets the window or its recovery."""
        end = self.end if self.end >= 0 else float("inf")
        return self.start <= (at if until is None else until) and at <= end + recovery_s


@dataclass
class Faults:
    duration_s: float
    recovery_s: float  # after a window ends, the system settles this long (still attributed)
    windows: list[Window] = field(default_factory=list)

    def active(self, at: float, until: float | None = None) -> list[Window]:
        """The windows (with their recovery) that meet ``at`` (or [``at``, ``until``]):
        overlaps are possible."""
        return [w for w in self.windows if w.covers(at, self.recovery_s, until)]

    async def run(self, cluster: Cluster, stop: asyncio.Event) -> None:
        for name, start, length, shortest in PLAN:
            if not await _sleep_until(cluster, start * self.duration_s, stop):
                return
            window = Window(name, cluster.now())
            self.windows.append(window)
            await self._inflict(cluster, name, max(shortest, length * self.duration_s), stop)
            window.end = cluster.now()

    async def _inflict(
        self, cluster: Cluster, name: str, length_s: float, stop: asyncio.Event
    ) -> None:
        if name == "replica killed":
            await cluster.kill_replica()
            await asyncio.sleep(REPLICA_DOWN_S)
            await cluster.start_killed_replica()
        elif name == "database restart":
            await cluster.stop_database()
            await asyncio.sleep(DB_DOWN_S)
            await cluster.start_database()
        else:
            await cluster.set_upstream_fault(UPSTREAM_MODES[name])
            try:
                await asyncio.wait_for(stop.wait(), length_s)
            except TimeoutError:
                pass
            finally:
                await cluster.set_upstream_fault("none")


async def _sleep_until(cluster: Cluster, at: float, stop: asyncio.Event) -> bool:
    """False when ``stop`` came first."""
    delay = at - cluster.now()
    if delay <= 0:
        return not stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), delay)
    except TimeoutError:
        return True
    return False
