"""The periodic-task helper: a loop that outlives every failure of its body,
counts and logs each, backs off, wakes early and stops cleanly."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, MutableMapping
from typing import Any

import pytest
import structlog

from shared.metrics import REGISTRY
from shared.periodic import PeriodicTask
from tests.support.metrics import background_failures


class Body:
    """A body that fails as scripted (an exception per run, None for success)
    and notes when each run started, in loop time."""

    def __init__(self, script: Iterable[BaseException | None] = ()) -> None:
        self._script = list(script)
        self.started: list[float] = []
        self.ran = asyncio.Event()
        self.gate: asyncio.Event | None = None  # set: each run waits for it
        self.cancelled = 0
        self.finished = 0

    async def __call__(self) -> None:
        self.started.append(asyncio.get_running_loop().time())
        self.ran.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        failure = self._script.pop(0) if self._script else None
        if failure is not None:
            raise failure

    async def runs(self, count: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self.started) < count:
                self.ran.clear()
                await self.ran.wait()

    def gaps(self) -> list[float]:
        return [later - earlier for earlier, later in itertools.pairwise(self.started)]


async def run_for(task: PeriodicTask, body: Body, runs: int) -> list[MutableMapping[str, Any]]:
    """Start ``task`` at once, stop it after ``runs`` runs; returns what it logged."""
    with structlog.testing.capture_logs() as logs:
        task.start(first_delay_s=0)
        try:
            await body.runs(runs)
        finally:
            await task.stop()
    return logs


async def held_in_a_run(
    name: str, interval_s: float = 3600
) -> tuple[PeriodicTask, Body, asyncio.Event]:
    """A started task whose run under way waits for the returned gate."""
    body = Body()
    body.gate = asyncio.Event()
    task = PeriodicTask(name, body, interval_s=interval_s)
    task.start(first_delay_s=0)
    await body.runs(1)
    return task, body, body.gate


async def test_a_body_raising_a_bug_is_logged_counted_and_run_again_after_the_backoff() -> None:
    body = Body([RuntimeError("a bug")])
    task = PeriodicTask("test_crash", body, interval_s=0.01, retry_s=0.3)
    logs = await run_for(task, body, 3)

    assert background_failures("test_crash") == 1
    crashed = [entry for entry in logs if entry["event"] == "background_task_crashed"]
    assert [(e["log_level"], e["task"]) for e in crashed] == [("error", "test_crash")]
    assert "exc_info" in crashed[0]
    first, second = body.gaps()[:2]
    assert first >= 0.29  # the backoff, not the interval
    assert second < 0.25  # a success brings the interval back
    recovered = [e for e in logs if e["event"] == "background_task_recovered"]
    assert [(e["task"], e["failures"]) for e in recovered] == [("test_crash", 1)]


async def test_the_backoff_doubles_with_each_further_failure_up_to_its_cap() -> None:
    body = Body([OSError("away")] * 4)
    task = PeriodicTask("test_backoff", body, interval_s=0.01, retry_s=0.1, retry_max_s=0.2)
    await run_for(task, body, 5)

    gaps = body.gaps()
    assert gaps[0] >= 0.09
    assert gaps[1] >= 0.19
    assert 0.19 <= gaps[3] < 0.4  # capped: doubling on would wait 0.8
    assert background_failures("test_backoff") == 4


async def test_an_outage_of_expected_errors_logs_one_warning_and_one_recovery() -> None:
    body = Body([OSError("connection refused")] * 3)
    task = PeriodicTask("test_outage", body, interval_s=0.01, retry_s=0.01)
    logs = await run_for(task, body, 4)

    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("background_task_failed", "warning"),
        ("background_task_recovered", "info"),
    ]
    assert logs[0]["error"] == "connection refused"
    assert background_failures("test_outage") == 3


async def test_the_failure_counter_shows_every_task_at_zero_before_any_failure() -> None:
    PeriodicTask("test_fresh", Body(), interval_s=1)
    sample = REGISTRY.get_sample_value("crank_background_failures_total", {"task": "test_fresh"})
    assert sample == 0


async def test_wake_runs_the_body_before_the_interval() -> None:
    body = Body()
    task = PeriodicTask("test_wake", body, interval_s=3600)
    task.start()
    try:
        await asyncio.sleep(0.05)
        assert body.started == []
        task.wake()
        await body.runs(1, timeout_s=5)
    finally:
        await task.stop()


async def test_stop_ends_a_sleeping_loop_at_once() -> None:
    body = Body()
    task = PeriodicTask("test_stop", body, interval_s=3600)
    task.start(first_delay_s=0)
    await body.runs(1)

    await asyncio.wait_for(task.stop(), timeout=1)

    await asyncio.sleep(0.05)
    assert len(body.started) == 1


async def test_stop_cancels_a_run_under_way_by_default() -> None:
    task, body, _ = await held_in_a_run("test_cancel")  # the gate never opens

    await asyncio.wait_for(task.stop(), timeout=1)

    assert (body.cancelled, body.finished) == (1, 0)
    assert background_failures("test_cancel") == 0  # a cancellation is no failure


async def test_stop_can_let_the_run_under_way_finish_and_then_run_a_final_time() -> None:
    task, body, gate = await held_in_a_run("test_final")

    stopping = asyncio.create_task(task.stop(wait_s=None, final_run=True))
    await asyncio.sleep(0.05)
    assert not stopping.done()  # waiting for the run under way
    gate.set()
    await asyncio.wait_for(stopping, timeout=1)

    assert (len(body.started), body.finished, body.cancelled) == (2, 2, 0)


async def test_a_failed_final_run_is_counted_and_raised_to_the_owner() -> None:
    body = Body([OSError("away")])
    task = PeriodicTask("test_final_failure", body, interval_s=3600)
    task.start()

    with (
        structlog.testing.capture_logs() as logs,
        pytest.raises(OSError, match="away"),
    ):
        await task.stop(final_run=True)

    assert logs == []  # the owner says what was lost
    assert background_failures("test_final_failure") == 1


async def test_a_stop_requested_during_a_run_lets_it_finish_and_starts_no_other() -> None:
    task, body, gate = await held_in_a_run("test_request_stop", interval_s=0.01)

    task.request_stop()  # as from a signal handler: no await
    gate.set()
    await asyncio.sleep(0.1)

    assert (len(body.started), body.finished) == (1, 1)
    await task.stop()
