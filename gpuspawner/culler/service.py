"""The culler as a hub-managed service.

Every ``cull_every`` seconds: read the hub's active servers (one paginated
listing), the scheduler service's GPU utilization and notebook workloads (two
calls), decide per server with ``decide.decide``, then act: post a warning
notice, stop the server through the hub (the spawner then releases its GPUs
and queued work starts in the scheduler's next cycle), or clear a warning
that no longer applies. Every cull is recorded in the audit log with the
numbers that justified it. Warnings live in the service's database (as
notices), so a restarted culler neither forgets nor repeats them.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections import deque
from typing import Awaitable, Callable, Optional
from urllib.parse import quote

from ..client.aio import AsyncApi
from ..client.request import Request
from ..times import from_iso
from .decide import (Decision, Policy, PolicyRule, Server, decide, required_history,
                     resolve_policy, utcnow)
from .shares import held_samples

log = logging.getLogger("gpuhub.culler")
WARNING_KIND = "cull-warning"

# fetch(method, url, body) -> parsed JSON (None for an empty body); raises on HTTP errors.
Fetch = Callable[[str, str, Optional[dict]], Awaitable[object]]


class FetchApi(AsyncApi):
    """The service's API (the generated client) over the culler's ``fetch``."""

    def __init__(self, call: Callable[..., Awaitable[object]], root: str):
        self.call, self.root = call, root

    async def _send(self, request: Request):
        return await self.call(request.method, self.root + request.target, request.body)


class Culler:
    def __init__(self, policy: Policy, rules: list[PolicyRule], *, hub_api: str, gpuhub_api: str,
                 fetch: Fetch, cull_every: float, concurrency: int = 10, page_size: int = 0,
                 dry_run: bool = False, clock: Callable[[], dt.datetime] = utcnow):
        self.policy, self.rules = policy, rules
        self.hub_api, self.gpuhub_api = hub_api.rstrip("/"), gpuhub_api.rstrip("/")
        self.fetch, self.clock = fetch, clock
        self.cull_every, self.dry_run = cull_every, dry_run
        self.page_size = page_size
        self.limit = asyncio.Semaphore(max(1, concurrency))
        self.samples: dict[str, deque] = {}
        # (user, server) -> (notice id, when warned)
        self.warned: dict[tuple[str, str], tuple[int, dt.datetime]] = {}
        self.calls = 0
        self.service = FetchApi(self._call, self.gpuhub_api)

    async def _call(self, method: str, url: str, body: Optional[dict] = None):
        self.calls += 1
        return await self.fetch(method, url, body)

    # ---- reading ----------------------------------------------------------
    async def hub_servers(self) -> list[tuple[dict, str, dict]]:
        """(user model, server name, server model) of every active server."""
        out, offset = [], 0
        while True:
            query = "state=active" + (f"&offset={offset}" if offset else "") + (
                f"&limit={self.page_size}" if self.page_size else "")
            page = await self._call("GET", f"{self.hub_api}/users?{query}")
            users = page["items"] if isinstance(page, dict) else page
            for user in users:
                for name, server in (user.get("servers") or {}).items():
                    out.append((user, name, server))
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt or not users:
                return out
            offset = nxt["offset"]

    async def restore_warnings(self) -> None:
        notices = (await self.service.list_notices())["notices"]
        for n in notices:
            if n["kind"] == WARNING_KIND:
                self.warned[(n["user"], n["server"])] = (n["id"], from_iso(n["created_at"]))

    def _record(self, gpus: list[dict], now: dt.datetime) -> dict[str, tuple]:
        """Keep utilization samples per workload (a share of a GPU: its own
        processes', shares.py); returns workload -> its GPUs."""
        keep = max([required_history(self.policy)] +
                   [required_history(r.apply(self.policy)) for r in self.rules])
        held = held_samples(gpus, now)
        for wid, samples in held.items():
            ring = self.samples.setdefault(wid, deque())
            ring.extend(samples)
            while ring and (now - ring[0].time).total_seconds() > keep:
                ring.popleft()
        for wid in list(self.samples):
            if wid not in held:
                del self.samples[wid]
        return {wid: tuple(s.gpu for s in samples) for wid, samples in held.items()}

    # ---- one pass -----------------------------------------------------------
    async def cycle(self) -> list[tuple[str, Decision]]:
        now = self.clock()
        servers = await self.hub_servers()
        gpus = (await self.service.list_gpus())["gpus"]
        notebooks = (await self.service.list_workloads(
            kind="notebook", state=["running"], limit=1000))["workloads"]
        devices = self._record(gpus, now)
        by_server = {(w["user"], w["name"]): w for w in notebooks}
        decisions, actions = [], []
        servers_of: dict[str, int] = {}
        for user, _name, _model in servers:
            servers_of[user["name"]] = servers_of.get(user["name"], 0) + 1
        for user, name, model in servers:
            w = by_server.get((user["name"], name))
            server = Server(user=user["name"], name=name, groups=frozenset(user.get("groups") or ()),
                            team=w["team"] if w else None, pool=w["pool"] if w else None,
                            gpus=devices.get(w["id"], ()) if w else (),
                            started=from_iso(model.get("started")) or now,
                            last_activity=from_iso(model.get("last_activity")),
                            pending=model.get("pending"),
                            gpu_share=(w.get("gpu_share") or 0.0) if w else 0.0)
            policy = resolve_policy(self.policy, self.rules, server)
            samples = list(self.samples.get(w["id"], ())) if w else []
            warned = self.warned.get((server.user, name))
            d = decide(server, samples, policy, now, warned[1] if warned else None)
            decisions.append((server.label, d))
            # --cull-users (idle-culler's meaning): once its last server is
            # culled, a non-admin user (or any, with --cull-admin-users) goes too.
            delete_user = (policy.cull_users and servers_of[user["name"]] == 1
                           and (policy.cull_admin_users or not user.get("admin")))
            actions.append(self._act(server, policy, d, warned, delete_user))
        await asyncio.gather(*actions)
        return decisions

    async def _act(self, server: Server, policy: Policy, d: Decision, warned,
                   delete_user: bool = False) -> None:
        key = (server.user, server.name)
        if self.dry_run:
            if d.action != "keep":
                log.info("dry run: would %s %s: %s", d.action, server.label, d.reason)
            return
        async with self.limit:
            if d.action == "warn" and d.notify:
                expires = (d.cull_at or self.clock()) + dt.timedelta(seconds=2 * self.cull_every)
                n = await self.service.post_notice({
                    "user": server.user, "server": server.name, "kind": WARNING_KIND,
                    "message": d.reason, "expires_at": expires.timestamp(),
                    "data": json.loads(json.dumps(d.numbers, default=str))})
                self.warned[key] = (n["id"], d.warned_at or self.clock())
            elif d.action == "cull":
                await self._cull(server, policy, d)
                await self._clear(key)
                if delete_user:
                    await self._call("DELETE", f"{self.hub_api}/users/{quote(server.user)}")
            elif d.action == "keep" and warned:
                await self._clear(key)

    async def _cull(self, server: Server, policy: Policy, d: Decision) -> None:
        user = quote(server.user)
        # The reason goes along: the hub tells the server's user (spawner/stop_reason.py).
        if server.name:
            url = f"{self.hub_api}/users/{user}/servers/{quote(server.name)}"
            body = {"reason": d.reason, **({"remove": True} if policy.remove_named_servers
                                            else {})}
        else:
            url, body = f"{self.hub_api}/users/{user}/server", {"reason": d.reason}
        log.warning("culling %s: %s", server.label, d.reason)
        await self._call("DELETE", url, body)
        await self.service.post_audit_entry({
            "action": "cull", "target": server.label,
            "detail": {"reason": d.reason, "rule": d.rule,
                       **json.loads(json.dumps(d.numbers, default=str))}})

    async def _clear(self, key: tuple[str, str]) -> None:
        entry = self.warned.pop(key, None)
        if entry is not None:
            await self.service.delete_notice(entry[0])
