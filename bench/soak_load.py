"""The soak's load: an MCP client mix and a scripted approver, both through the proxy.

Every HTTP exchange is recorded (``Exchange``: when it started, what it was, the
HTTP status or 0 for a dropped connection, the outcome, its latency), so the
ledger can take p99 outside the fault windows and attribute every 5xx to one.
What each flow learned (accepted idempotent calls and the id they answered,
approvals and their ``request_id``, confirmed DELETEs, token reuses, decisions)
goes in ``Books`` for the ledger to compare with the upstream's own counts and
the database.

The mix, per arrival (2026-07-28 stateless era, ``Connection: close`` so the
proxy picks a replica per request): tools/list 20 %, a plain call 35 %, an
idempotent call 20 % (retried with the same key until the gateway answers a
definite result; one in ten accepted is sent again and must be a replay of the
same id), a DELETE with its confirmation 10 % (one in ten confirmed tokens is
sent again and must be refused), an approval-gated call 15 % (repeated on a
dropped connection or 5xx: the repeat finds the same active approval).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
MIX = (("list", 20), ("plain", 35), ("idempotent", 20), ("delete", 10), ("approval", 15))
DEFINITE_FAILURES = frozenset({"idempotency_conflict", "invalid_arguments"})
TOKEN = re.compile(r'_crank_confirmation_token="(ct_[^"]+)"')
REQUEST_TIMEOUT_S = 60.0  # a call waits for the database through its restart, a slow upstream
FLOW_DEADLINE_S = 90.0  # one flow's retries end here: faults last less than this


@dataclass(frozen=True, slots=True)
class Exchange:
    at: float  # seconds since the run started, when the request was sent
    kind: str
    status: int  # HTTP status; 0: no answer (refused or dropped connection, time-out)
    outcome: str  # ok, approval_required, an error_code, http_<status>, dropped:<why>, timeout
    latency_s: float


@dataclass
class Books:
    """What the client side knows, for the ledger."""

    accepted: dict[str, str] = field(default_factory=dict)  # payment key -> id answered
    abandoned: dict[str, str] = field(default_factory=dict)  # payment key -> last outcome
    replays: Counter[str] = field(default_factory=Counter)  # same_id, other_id, not_replayed
    confirmed: set[str] = field(default_factory=set)  # orders whose DELETE ran (answered ok)
    token_reuse: Counter[str] = field(default_factory=Counter)  # refused, accepted, other
    approvals: dict[str, str] = field(default_factory=dict)  # approval id -> request_id
    approval_requests_abandoned: int = 0
    # approval id -> (crank/approval_id of the delivery, outcome, upstream id when ok)
    outcomes: dict[str, tuple[Any, str, Any]] = field(default_factory=dict)
    outcomes_lost: int = 0  # a repeat got a new approval: the outcome went to a lost answer
    outcomes_waiting: int = 0  # the flow's deadline passed before the outcome came
    decisions: dict[str, str] = field(default_factory=dict)  # approval id -> approve|deny
    decided_ok: Counter[str] = field(default_factory=Counter)  # approval id -> 200 answers
    decided_conflict: Counter[str] = field(default_factory=Counter)  # approval id -> 409s
    flows: Counter[str] = field(default_factory=Counter)  # arrivals started, per kind
    shed: int = 0  # arrivals dropped because too many flows were in flight
    crashed: Counter[str] = field(default_factory=Counter)  # flows that raised, per kind
    crash_examples: list[str] = field(default_factory=list)


class Recorder:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.started_wall = time.time()  # to place the gateways' log lines on the run's clock
        self.exchanges: list[Exchange] = []

    def now(self) -> float:
        return time.monotonic() - self.started


def approve_or_deny(approval_id: str) -> str:
    """The scripted approver's decision, fixed per id (so a retry decides the same)."""
    return "approve" if hashlib.sha256(approval_id.encode()).digest()[0] < 180 else "deny"


class Client:
    """MCP calls and approval decisions through the proxy, each exchange recorded."""

    def __init__(
        self, http: aiohttp.ClientSession, base: str, agent_key: str, approval_key: str
    ) -> None:
        self.http, self.base = http, base
        self.agent_key, self.approval_key = agent_key, approval_key
        self.recorder = Recorder()
        self.books = Books()
        self._ids = itertools.count(1)

    async def _exchange(
        self, kind: str, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> tuple[int, Any]:
        at, started = self.recorder.now(), time.monotonic()
        status, answer, outcome = 0, None, "dropped"
        try:
            async with self.http.request(
                method, self.base + path, data=body, headers=headers
            ) as response:
                status = response.status
                raw = await response.read()
            answer = msgspec.json.decode(raw) if raw else None
            outcome = _outcome(status, answer)
        except TimeoutError:
            outcome = "timeout"  # no answer within REQUEST_TIMEOUT_S: never explained by a fault
        except (aiohttp.ClientError, msgspec.DecodeError) as exc:
            outcome = f"{'dropped' if status == 0 else 'unreadable'}:{type(exc).__name__}"
        self.recorder.exchanges.append(
            Exchange(at, kind, status, outcome, time.monotonic() - started)
        )
        return status, answer

    async def mcp(
        self, kind: str, method: str, params: dict[str, Any]
    ) -> tuple[int, dict[str, Any] | None]:
        headers = {
            "Authorization": f"Bearer {self.agent_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
        }
        if method == "tools/call":
            headers["Mcp-Name"] = params["name"]
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        message["params"] = params | {"_meta": META}
        status, answer = await self._exchange(
            kind, "POST", "/mcp/v1/soak/shop", headers, msgspec.json.encode(message)
        )
        result = answer.get("result") if isinstance(answer, dict) else None
        return status, result if isinstance(result, dict) else None

    async def call(self, kind: str, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        """(outcome, result): ok / approval_required / an error_code / http_<n> / dropped."""
        status, result = await self.mcp(kind, "tools/call", {"name": name, "arguments": arguments})
        if result is None:
            return ("dropped" if status == 0 else f"http_{status}"), None  # the exchange says why
        content = result.get("structuredContent") or {}
        if result.get("isError"):
            return str(content.get("error_code", "error")), result
        if content.get("status") == "approval_required":
            return "approval_required", result
        return "ok", result

    async def approvals_request(
        self, kind: str, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.approval_key}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return await self._exchange(kind, method, "/v1/soak/shop/approvals" + path, headers, body)

    # --- the flows -----------------------------------------------------------------------

    async def tools_list(self) -> None:
        await self.mcp("list", "tools/list", {})

    async def plain(self, n: int) -> None:
        await self.call("plain", "lookup_item", {"ref": f"r-{n}"})

    async def idempotent(self, n: int) -> None:
        key, books = f"pay-{n}", self.books
        arguments = {"amount": n, "request_id": key}
        outcome, result = await self._until_definite("idempotent", "create_payment", arguments)
        if outcome != "ok":
            books.abandoned[key] = outcome
            return
        books.accepted[key] = str(result["structuredContent"]["id"])
        if n % 10 == 0:  # the same call again: a replay of the same answer, not a new payment
            again, replay = await self._until_definite("idempotent", "create_payment", arguments)
            if again != "ok":
                books.replays[f"answered_{again}"] += 1
            elif not _meta(replay).get("crank/replayed"):
                books.replays["not_replayed"] += 1
            elif replay["structuredContent"]["id"] != books.accepted[key]:
                books.replays["other_id"] += 1
            else:
                books.replays["same_id"] += 1

    async def delete(self, n: int) -> None:
        order, deadline = f"o-{n}", time.monotonic() + FLOW_DEADLINE_S
        while time.monotonic() < deadline:
            outcome, result = await self.call("delete", "cancel_order", {"order": order})
            token = _token(result) if outcome == "confirmation_required" else None
            if token is None:
                await asyncio.sleep(1.0)
                continue
            arguments = {"order": order, "_crank_confirmation_token": token}
            outcome, _ = await self.call("delete", "cancel_order", arguments)
            if outcome != "ok":  # the token is spent either way: ask for a new one
                await asyncio.sleep(1.0)
                continue
            self.books.confirmed.add(order)
            if n % 10 == 0:
                reuse, _ = await self.call("delete", "cancel_order", arguments)
                label = {"confirmation_invalid": "refused", "ok": "accepted"}.get(reuse)
                if label is None:  # no answer (a killed replica) says nothing either way
                    label = "no answer" if reuse.startswith(("dropped", "timeout")) else "other"
                self.books.token_reuse[label] += 1
            return

    async def approval(self, n: int) -> None:
        """Asks, then repeats the same call until the outcome comes back (once)."""
        arguments = {"item": f"i-{n}", "request_id": f"ord-{n}"}
        deadline, approval_id = time.monotonic() + FLOW_DEADLINE_S, None
        while time.monotonic() < deadline:
            outcome, result = await self.call("approval", "place_order", arguments)
            if outcome == "approval_required":
                answered = str(result["structuredContent"]["approval_id"])
                if approval_id is None:
                    approval_id = answered
                    self.books.approvals[approval_id] = f"ord-{n}"
                elif answered != approval_id:  # a new approval: our outcome went elsewhere
                    self.books.outcomes_lost += 1
                    return
            elif approval_id is not None and _delivered(result):
                delivered = (_meta(result).get("crank/approval_id"), outcome)
                content = result["structuredContent"] if outcome == "ok" else {}
                self.books.outcomes[approval_id] = (*delivered, content.get("id"))
                return
            await asyncio.sleep(1.0)
        if approval_id is None:
            self.books.approval_requests_abandoned += 1
        else:
            self.books.outcomes_waiting += 1

    async def _until_definite(
        self, kind: str, name: str, arguments: dict[str, Any]
    ) -> tuple[str, Any]:
        """Repeat the call until it succeeds or fails for good (faults are transient)."""
        deadline = time.monotonic() + FLOW_DEADLINE_S
        outcome, result = "dropped", None
        while time.monotonic() < deadline:
            outcome, result = await self.call(kind, name, arguments)
            if outcome == "ok" or outcome in DEFINITE_FAILURES:
                return outcome, result
            await asyncio.sleep(_retry_after(result))
        return outcome, result

    # --- the approver --------------------------------------------------------------------

    async def approver(self, stop: asyncio.Event, interval_s: float = 0.3) -> None:
        """Lists pending approvals and decides each, until ``stop``; retries what failed."""
        while not stop.is_set():
            status, page = await self.approvals_request(
                "approver", "GET", "?status=pending&limit=200"
            )
            if status == 200 and isinstance(page, dict):
                ids = [str(item["id"]) for item in page.get("items", [])]
                await asyncio.gather(*(self.decide(approval_id) for approval_id in ids))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def decide(self, approval_id: str) -> None:
        decision = approve_or_deny(approval_id)
        self.books.decisions[approval_id] = decision
        body = b'{"approve": "yes"}' if decision == "approve" else b'{"approve": "no"}'
        status, _ = await self.approvals_request(
            "approver", "POST", f"/{approval_id}/{decision}", body
        )
        if status == 200:
            self.books.decided_ok[approval_id] += 1
        elif status == 409:  # decided already: an earlier answer of ours was lost
            self.books.decided_conflict[approval_id] += 1


def _outcome(status: int, answer: Any) -> str:
    if status != 200:
        return f"http_{status}"
    result = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(result, dict):
        return "ok"  # the approvals endpoints' records, tools/list
    content = result.get("structuredContent") or {}
    if result.get("isError"):
        return str(content.get("error_code", "error"))
    return "approval_required" if content.get("status") == "approval_required" else "ok"


def _meta(result: Any) -> dict[str, Any]:
    meta = result.get("_meta") if isinstance(result, dict) else None
    return meta if isinstance(meta, dict) else {}


def _delivered(result: Any) -> bool:
    """An approval's outcome: it carries ``crank/approval_status``."""
    return "crank/approval_status" in _meta(result)


def _token(result: Any) -> str | None:
    text = str(((result or {}).get("structuredContent") or {}).get("message", ""))
    found = TOKEN.search(text)
    return found.group(1) if found else None


def _retry_after(result: Any) -> float:
    content = ((result or {}).get("structuredContent") or {}) if isinstance(result, dict) else {}
    seconds = content.get("retry_after_s")
    return min(5.0, float(seconds)) if isinstance(seconds, int | float) else 1.0


@dataclass
class Pacer:
    """Arrivals at ``rate`` per second, each a flow from the mix, at most ``max_in_flight``
    at once (an arrival past it is shed and counted)."""

    client: Client
    rate: float
    max_in_flight: int = 256
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def flow(self, kind: str, n: int) -> Callable[[], Any]:
        c = self.client
        return {
            "list": c.tools_list,
            "plain": lambda: c.plain(n),
            "idempotent": lambda: c.idempotent(n),
            "delete": lambda: c.delete(n),
            "approval": lambda: c.approval(n),
        }[kind]

    async def run(self, stop: asyncio.Event) -> None:
        kinds, weights = [kind for kind, _ in MIX], [weight for _, weight in MIX]
        chooser = random.Random(7)  # noqa: S311 - a reproducible mix, not a secret
        next_at = time.monotonic()
        while not stop.is_set():
            next_at += 1.0 / self.rate
            delay = next_at - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            elif delay < -1.0:
                next_at = time.monotonic()  # fell behind (a stalled loop): do not burst
            kind = chooser.choices(kinds, weights)[0]
            if len(self._tasks) >= self.max_in_flight:
                self.client.books.shed += 1
                continue
            self.client.books.flows[kind] += 1
            task = asyncio.create_task(self.flow(kind, next(self._serial))())
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._done, kind))

    def _done(self, kind: str, task: asyncio.Task[None]) -> None:
        """A flow that raised is a bug of the soak, or an answer it did not expect."""
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            books = self.client.books
            books.crashed[kind] += 1
            if len(books.crash_examples) < 3:
                books.crash_examples.append(f"{kind}: {error!r}")

    async def finish(self, timeout_s: float) -> int:
        """Waits for the flows in flight; cancels what is left after ``timeout_s``."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
            return len(pending)
        return 0
