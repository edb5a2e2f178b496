"""What every fuzz test holds: the running target and the checks made once its cases
have run (the fixture that builds it is in conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings

from tests.gateway.fuzz.oracles import worker_rss_mib
from tests.gateway.fuzz.runs import Target
from tests.gateway.fuzz.wire import Sent, send
from tests.support.gateway import Gateway

# The gateway worker's resident memory may never pass this. docs/performance.md
# measures a worker holding 10,000 compiled operations at 255-270 MB and sets
# 300 MB as its target; the fuzz catalog has 8 tools and its worker starts near
# 85 MB (measured here), so 300 MB is over three times its own size: room for
# the 1 MiB bodies and 100-message batches the fuzzer sends, none for a leak or
# an unbounded buffer.
MAX_WORKER_RSS_MIB = 300


def ci_settings(examples: int) -> settings:
    """A bounded, repeatable run for CI: the same ``examples`` cases every time."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


@dataclass
class Fuzzed:
    target: Target
    gateway: Gateway
    start_rss_mib: float

    def assert_still_serving(self) -> tuple[float, float]:
        """The process is alive and answers /healthz; its worker stayed within
        ``MAX_WORKER_RSS_MIB``. Returns (RSS now, peak RSS) in MiB."""
        assert self.gateway.process.poll() is None, self.gateway.log()[-3000:]
        healthz = send(self.target.port, Sent("GET", "/healthz", (), b""))
        assert healthz.status == 200
        rss, peak = worker_rss_mib(self.gateway.process.pid)
        assert peak < MAX_WORKER_RSS_MIB, f"worker peak RSS {peak:.0f} MiB"
        return rss, peak

    def report(self) -> None:
        rss, peak = self.assert_still_serving()
        for outcome, count in sorted(self.target.outcomes.items()):
            print(f"{count:6d}  {outcome}")
        print(f"worker RSS {self.start_rss_mib:.0f} MiB at start, {rss:.0f} now, peak {peak:.0f}")
        assert "Traceback" not in self.gateway.log(), self.gateway.log()[-5000:]
