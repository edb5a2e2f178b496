"""The soak's upstream and webhook receiver, in one process (bench/soak.py starts it).

    python -m bench.soak_upstream --port P --control-port C --receiver-port R

On ``--port``, the API the soak's tools call, which fails on demand:

- ``GET /items/{ref}``: a read (plain calls); counted per ``ref``;
- ``POST /payments`` and ``POST /orders``: writes that honour ``Idempotency-Key``
  as a real payment API does: the first request with a key executes (a new id,
  ``pay-<n>`` or ``ord-<n>``), a repeat with the same body gets the stored answer
  without executing, a repeat with another body is a conflict (422). Requests,
  executions and conflicts are counted per key: the ledger's "executed at most
  once" is this count, not Crank's;
- ``DELETE /orders/{order}``: counted per order.

The fault mode (``PUT /_fault/<mode>`` on the control port) changes the API's
answers: ``none``; ``refused`` (the listening socket is closed); ``reset``
(every other request is reset before executing, the rest after: the side
effect happened and the answer is lost); ``slow`` (executes, then waits 0.5 to
5 s before answering); ``500`` and ``429`` storms (no execution).

On ``--receiver-port``, ``POST /hooks``: the webhook receiver, never faulted.
It checks each delivery's Standard Webhooks signature with the PyPI
``standardwebhooks`` package (the secret is sent to ``PUT /_secret`` on the
control port once the subscription exists) and counts deliveries per
``webhook-id``. ``GET /_ledger`` on the control port answers every count.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

MODES = ("none", "refused", "reset", "slow", "500", "429")


@dataclass
class Key:
    """One idempotency key as the upstream saw it."""

    body: bytes
    answer: dict[str, Any]
    requests: int = 1
    conflicts: int = 0


@dataclass
class Upstream:
    port: int
    mode: str = "none"
    executed: int = 0
    keys: dict[str, dict[str, Key]] = field(default_factory=lambda: {"payments": {}, "orders": {}})
    unkeyed: dict[str, int] = field(default_factory=lambda: {"payments": 0, "orders": 0})
    items: dict[str, int] = field(default_factory=dict)
    deletes: dict[str, int] = field(default_factory=dict)
    faulted: dict[str, int] = field(default_factory=dict)  # requests answered by a fault, per mode
    resets: int = 0
    site: web.TCPSite | None = None
    runner: web.AppRunner | None = None

    # --- the API -------------------------------------------------------------------------

    async def item(self, request: web.Request) -> web.StreamResponse:
        ref = request.match_info["ref"]
        fault = await self._fault_before(request)
        if fault is not None:
            return fault
        self.items[ref] = self.items.get(ref, 0) + 1
        return await self._answer(request, {"ref": ref, "stock": len(ref)})

    async def write(self, request: web.Request) -> web.StreamResponse:
        kind = request.path.strip("/")  # payments or orders
        body = await request.read()
        fault = await self._fault_before(request)
        if fault is not None:
            return fault
        key = request.headers.get("Idempotency-Key")
        if key is None:
            self.unkeyed[kind] += 1
            return await self._answer(request, self._execute(kind), status=201)
        seen = self.keys[kind].get(key)
        if seen is None:
            seen = self.keys[kind][key] = Key(body, self._execute(kind))
        else:
            seen.requests += 1
            if seen.body != body:
                seen.conflicts += 1
                return web.json_response({"message": "key reused with another body"}, status=422)
        return await self._answer(request, seen.answer, status=201)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        order = request.match_info["order"]
        fault = await self._fault_before(request)
        if fault is not None:
            return fault
        self.deletes[order] = self.deletes.get(order, 0) + 1
        return await self._answer(request, {"order": order, "cancelled": True})

    def _execute(self, kind: str) -> dict[str, Any]:
        self.executed += 1
        return {"id": f"{kind[:3]}-{self.executed}"}

    async def _fault_before(self, request: web.Request) -> web.StreamResponse | None:
        mode = self.mode
        if mode == "refused":  # a request on a connection kept from before: closed unanswered
            self.faulted[mode] = self.faulted.get(mode, 0) + 1
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500)
        if mode in ("500", "429"):
            self.faulted[mode] = self.faulted.get(mode, 0) + 1
            headers = {"Retry-After": "1"} if mode == "429" else {}
            return web.json_response(
                {"message": f"fault {mode}"}, status=int(mode), headers=headers
            )
        if mode == "reset" and random.random() < 0.5:  # noqa: S311 - a fault pattern, not a secret
            self.faulted["reset"] = self.faulted.get("reset", 0) + 1
            return self._reset(request)
        return None

    async def _answer(
        self, request: web.Request, body: dict[str, Any], *, status: int = 200
    ) -> web.StreamResponse:
        """The answer, unless the fault mode loses it after the work was done."""
        if self.mode == "reset":
            self.faulted["reset"] = self.faulted.get("reset", 0) + 1
            return self._reset(request)
        if self.mode == "slow":
            self.faulted["slow"] = self.faulted.get("slow", 0) + 1
            await asyncio.sleep(random.uniform(0.5, 5.0))  # noqa: S311
        return web.json_response(body, status=status)

    def _reset(self, request: web.Request) -> web.StreamResponse:
        """A TCP reset (SO_LINGER 0, then abort) instead of an answer."""
        self.resets += 1
        transport = request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return web.Response(status=500)  # never reaches the caller: the connection is gone

    # --- control -------------------------------------------------------------------------

    async def set_fault(self, request: web.Request) -> web.Response:
        mode = request.match_info["mode"]
        if mode not in MODES:
            return web.json_response({"message": f"modes: {', '.join(MODES)}"}, status=400)
        if mode == "refused" and self.site is not None:
            await self.site.stop()  # connects are refused until the site is back
            self.site = None
        if mode != "refused" and self.site is None:
            await self.listen()
        self.mode = mode
        return web.json_response({"mode": mode})

    async def listen(self) -> None:
        assert self.runner is not None
        self.site = web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True)
        await self.site.start()

    def ledger(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "executed": self.executed,
            "keys": {
                kind: {
                    key: {"requests": k.requests, "conflicts": k.conflicts, "id": k.answer["id"]}
                    for key, k in keys.items()
                }
                for kind, keys in self.keys.items()
            },
            "unkeyed": self.unkeyed,
            "items": self.items,
            "deletes": self.deletes,
            "faulted": self.faulted,
            "resets": self.resets,
        }


@dataclass
class Receiver:
    secret: str | None = None
    deliveries: dict[str, dict[str, Any]] = field(default_factory=dict)  # webhook-id -> facts
    unverified: int = 0

    async def hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            event = Webhook(self.secret or "").verify(body, headers) if self.secret else None
        except WebhookVerificationError:
            event = None
        if event is None:
            self.unverified += 1
            return web.Response(status=400, text="bad signature")
        webhook_id = headers["webhook-id"]
        seen = self.deliveries.setdefault(
            webhook_id,
            {"count": 0, "type": event["type"], "approval_id": event["data"]["approval_id"]},
        )
        seen["count"] += 1
        return web.Response(status=204)

    async def set_secret(self, request: web.Request) -> web.Response:
        self.secret = (await request.text()).strip()
        return web.Response(status=204)


async def serve(port: int, control_port: int, receiver_port: int) -> None:
    upstream, receiver = Upstream(port), Receiver()
    api = web.Application()
    api.router.add_get("/items/{ref}", upstream.item)
    api.router.add_post("/payments", upstream.write)
    api.router.add_post("/orders", upstream.write)
    api.router.add_delete("/orders/{order}", upstream.delete)
    control = web.Application()
    control.router.add_put("/_fault/{mode}", upstream.set_fault)
    control.router.add_put("/_secret", receiver.set_secret)

    async def ledger(_: web.Request) -> web.Response:
        answer = upstream.ledger()
        answer["webhooks"] = receiver.deliveries
        answer["webhooks_unverified"] = receiver.unverified
        return web.json_response(answer)

    control.router.add_get("/_ledger", ledger)
    hooks = web.Application()
    hooks.router.add_post("/hooks", receiver.hook)
    upstream.runner = web.AppRunner(api, access_log=None, handler_cancellation=True)
    await upstream.runner.setup()
    await upstream.listen()
    for app, app_port in ((control, control_port), (hooks, receiver_port)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", app_port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control-port", type=int, required=True)
    parser.add_argument("--receiver-port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.control_port, args.receiver_port))
