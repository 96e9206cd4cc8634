"""The admission path both GPU spawners share.

A notebook server that wants GPUs is a workload: before the server starts,
the spawner asks the scheduler service for them (on the user's behalf, with
the spawner's own token), waits in the queue while the progress page says
why, and starts the server on exactly the GPUs it was given. When the server
stops, crashes or is culled, the spawner releases the workload (the service
makes that idempotent, so it happens once). CPU-only servers skip all this.
"""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Optional

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Unicode, default
from traitlets.config import Configurable

from .options import GpuRequest, OptionsError, offers, parse_options, render_form
from .stop_reason import StopReasonMixin, exit_reason, note_stop_requests, requested_reason

RUNNING = "running"
QUEUED = "queued"


note_stop_requests()  # the hub's stops then say by whom (stop_reason.py)


class ServiceError(RuntimeError):
    pass


class GPUSpawnerMixin(StopReasonMixin, Configurable):
    """Mixed into a Spawner class before it (``class S(GPUSpawnerMixin, LocalProcessSpawner)``)."""

    gpuhub_api_url = Unicode(help="""
        The scheduler service's REST API as the hub reaches it (directly, not
        through the proxy). The embedded config sets it.

        Example::

            c.GPUSpawnerMixin.gpuhub_api_url = "http://127.0.0.1:8002/services/gpuhub/api/v1"
        """).tag(config=True)

    @default("gpuhub_api_url")
    def _api_url_default(self):
        return os.environ.get("GPUHUB_API_URL", "")

    gpuhub_token = Unicode(help="""
        The spawner's token for the scheduler service: a JupyterHub service
        token with ``custom:gpuhub:admin`` (it asks for GPUs on users'
        behalf). Default: $GPUHUB_SPAWNER_TOKEN.
        """).tag(config=True)

    @default("gpuhub_token")
    def _token_default(self):
        return os.environ.get("GPUHUB_SPAWNER_TOKEN", "")

    gpuhub_public_url = Unicode("", help="""
        The service's URL as notebook servers reach it, given to them as
        $GPUHUB_URL so that the `gpuhub` CLI and the lab extension find it.

        Example: ``http://127.0.0.1:8000/services/gpuhub``
        """).tag(config=True)

    team_group_prefix = Unicode("team-", help="""
        Groups named with this prefix are teams (as in the service's config).
        """).tag(config=True)

    queue_poll_interval = Float(5.0, help="""
        Longest wait (seconds) of one long poll of a queued server's workload:
        the service answers as soon as the scheduler admits it, so this only
        bounds how often the progress page's message is refreshed while it
        waits (1 to 5).
        """).tag(config=True)

    # ---- state that belongs to one spawn ------------------------------
    workload_id: Optional[str] = None
    devices: Optional[list] = None
    device_uuids: Optional[list] = None
    gpu_request: Optional[GpuRequest] = None
    # What a share's processes are told of it (its memory, MPS): the
    # service's share_env, read at admission for the server's start.
    share_env: Optional[dict] = None

    def load_state(self, state):
        super().load_state(state)
        self.workload_id = state.get("gpuhub_workload_id")
        self.devices = state.get("gpuhub_devices")
        self.device_uuids = state.get("gpuhub_device_uuids")
        self._load_stop(state)

    def get_state(self):
        state = super().get_state()
        if self.workload_id:
            state["gpuhub_workload_id"] = self.workload_id
            state["gpuhub_devices"] = self.devices
            state["gpuhub_device_uuids"] = self.device_uuids
        return self._save_stop(state)  # (kept past clear_state: the next page load shows it)

    def clear_state(self):
        # Nothing of a spawn (failed or not) may leak into the next one.
        super().clear_state()
        self.workload_id = None
        self.devices = None
        self.device_uuids = None
        self.gpu_request = None
        self.share_env = None
        self._progress_messages = []

    # ---- talking to the service ---------------------------------------
    async def _service(self, method: str, path: str, body: Any = None) -> Any:
        if not self.gpuhub_api_url:
            raise ServiceError("GPUSpawnerMixin.gpuhub_api_url is not set")
        req = HTTPRequest(self.gpuhub_api_url.rstrip("/") + path, method=method,
                          headers={"Authorization": f"token {self.gpuhub_token}",
                                   "Content-Type": "application/json"},
                          body=None if body is None else json.dumps(body),
                          allow_nonstandard_methods=True, request_timeout=30)
        try:
            resp = await AsyncHTTPClient().fetch(req)
        except OSError as e:  # the service is down (a hub shutdown stops it first)
            err = ServiceError(f"the scheduler service is not reachable: {e}")
            err.status = None
            raise err
        except HTTPClientError as e:
            detail = ""
            if e.response is not None and e.response.body:
                try:
                    detail = json.loads(e.response.body).get("error", "")
                except ValueError:
                    detail = e.response.body[:200].decode("utf-8", "replace")
            err = ServiceError(detail or str(e))
            err.status = e.code
            raise err
        return json.loads(resp.body) if resp.body else None

    def _teams(self) -> list[str]:
        prefix = self.team_group_prefix
        return sorted(g.name[len(prefix):] for g in self.user.groups
                      if g.name.startswith(prefix) and len(g.name) > len(prefix))

    async def _offers(self):
        pools = (await self._service("GET", "/pools"))["pools"]
        every = (await self._service("GET", "/teams"))["teams"]
        # In no team: the service's default team (c.GpuHubService.default_team), if any.
        mine = set(self._teams()) or {t["name"] for t in every if t.get("default")}
        teams = [t for t in every if t["name"] in mine]
        # A team with no row yet still has the default quota: show it with none.
        known = {t["name"] for t in teams}
        teams += [{"name": t, "quotas": {}} for t in sorted(mine - known)]
        # every team: which of them could lend GPUs past the user's team's quota
        return offers(pools, teams, every)

    # ---- the spawn form -------------------------------------------------
    async def _gpu_options_form(self, spawner=None) -> str:
        self._offers_seen = await self._offers()
        # The admin panel's Teams & quotas page, under the hub's base URL.
        base = self.hub.base_url[:-len("hub/")] if self.hub.base_url.endswith("hub/") else "/"
        return render_form(self._offers_seen, admin_fix_url=(
            f"{base}services/gpuhub/admin/teams" if self.user.admin else ""))

    @default("options_form")
    def _options_form_default(self):
        return self._gpu_options_form

    @default("apply_user_options")
    def _apply_user_options_default(self):
        # team, pool, gpus and gpu_share are checked and applied by admit() in start().
        return lambda spawner, user_options: None

    def options_from_form(self, formdata):
        offered = getattr(self, "_offers_seen", None)
        if offered is None:
            return formdata  # checked in start(), against fresh numbers
        try:
            request = parse_options(formdata, offered)
        except OptionsError as e:
            raise ValueError(e.message if e.field == "gpus" else str(e))
        return {"team": request.team, "pool": request.pool, "gpus": request.gpus,
                **({"gpu_share": str(request.share)} if request.share else {})}

    # ---- admission ---------------------------------------------------------
    def _say(self, message: str, progress: int = 10) -> None:
        self._progress_messages = getattr(self, "_progress_messages", [])
        self._progress_messages.append({"progress": progress, "message": message})

    async def admit(self) -> Optional[dict]:
        """Ask for the GPUs in ``user_options`` and wait until they are ours.
        Returns the running workload (None for a CPU-only server)."""
        self.forget_stop()  # a new run: the last one's end is told no more
        self._stop_request = None
        try:
            request = parse_options(self.user_options or {}, await self._offers())
        except OptionsError as e:
            raise web.HTTPError(400, str(e))
        self.gpu_request = request
        if request.cpu_only:
            self.devices, self.device_uuids = [], []
            return None
        w = await self._service("POST", "/workloads", {
            "kind": "notebook", "user": self.user.name, "team": request.team,
            "pool": request.pool, "gpus": request.gpus, "name": self.name,
            **({"gpu_share": str(request.share)} if request.share else {})})
        self.workload_id = w["id"]
        want = request.wanted()
        self._say(f"asked the scheduler for {want} for team {request.team}")
        last = None
        try:
            first = True
            while True:
                # A long poll: the service answers when the scheduler admits it
                # (or after the poll interval), not a poll interval late.
                wait = "" if first else \
                    f"?wait_while=queued&timeout={min(5, max(1, int(self.queue_poll_interval)))}"
                first = False
                w = await self._service("GET", f"/workloads/{self.workload_id}{wait}")
                if w["state"] == RUNNING:
                    break
                if w["state"] != QUEUED:
                    raise web.HTTPError(503, f"the scheduler ended the request: {w['reason']}")
                msg = (f"waiting for {want}, position {w.get('queue_position') or '?'} in team "
                       f"{request.team}'s queue")
                if w["reason"] and w["reason"] != "queued":  # not yet looked at: no reason
                    msg += f": {w['reason']}"
                if (w.get("expected_start") or {}).get("text"):
                    msg += f"; {w['expected_start']['text']}"
                if msg != last:
                    self._say(msg, 20)
                    last = msg
        except BaseException:
            await self.release("the spawn was cancelled or failed while queued")
            raise
        self.devices = w.get("devices", [])
        self.device_uuids = w.get("device_uuids", [])
        self.share_env = dict(w.get("share_env") or {})
        held = w.get("share_enforcement")
        self._say(f"got {want} (devices {', '.join(map(str, self.devices))})"
                  + (f"; compute {held['compute']}" if held else "") + "; starting the server", 50)
        return w

    async def release(self, reason: str, wid: Optional[str] = None) -> None:
        """Give the workload's GPUs back (``wid``: one remembered by a caller
        whose base class cleared the state first)."""
        wid = wid or self.workload_id
        self.workload_id = None
        if not wid:
            return
        self.log.info("releasing %s's workload %s: %s", self._log_name, wid, reason)
        try:
            await self._service("POST", f"/workloads/{wid}/release", {"reason": reason})
        except ServiceError as e:
            # The server is gone either way; the service finds such workloads
            # itself (GpuHubService.reconcile_interval) and releases them.
            if getattr(e, "status", None) != 404:
                self.log.error("could not release workload %s now: %s", wid, e)

    async def workload_lost(self) -> Optional[str]:
        """Why the server must stop (its GPUs were reclaimed), or None."""
        if not self.workload_id:
            return None
        try:
            w = await self._service("GET", f"/workloads/{self.workload_id}")
        except ServiceError as e:
            if getattr(e, "status", None) == 404:
                return "its workload is gone"
            return None  # the service is down: keep the server
        if w["state"] == RUNNING:
            return None
        return f"the scheduler took its GPUs back: {w['reason'] or w['state']}"

    def gpu_env(self) -> dict[str, str]:
        """What a server learns of its admission (its GPUs are the spawner's
        to show: visible_devices locally, the device plugin on Kubernetes)."""
        env = {}
        if self.workload_id:
            env["GPUHUB_WORKLOAD_ID"] = self.workload_id
        if self.gpu_request is not None:
            env["GPUHUB_TEAM"] = self.gpu_request.team
        env.update(self.share_env or {})
        if self.gpuhub_public_url:
            env["GPUHUB_URL"] = self.gpuhub_public_url
        return env

    async def admission_progress(self, until=lambda: False):
        """The admission's messages, until the spawn is over or ``until()``."""
        sent = 0
        while True:
            messages = getattr(self, "_progress_messages", [])
            while sent < len(messages):
                yield messages[sent]
                sent += 1
            if until() or not getattr(self, "_spawn_pending", False):
                return
            await asyncio.sleep(0.5)

    async def progress(self):
        async for event in self.admission_progress():
            yield event

    # ---- used by the spawners' poll() and stop() ---------------------------
    _stopping = False

    async def poll_and_check(self, base_poll) -> Optional[int]:
        """``base_poll``: the spawner class's own poll. Releases the GPUs when
        the server is gone; stops the server when its GPUs were taken back.
        (Base classes clear the state as they notice the end: the workload
        is remembered first.)"""
        wid = self.workload_id
        status = await base_poll()
        if status is not None:
            if not self._stopping:
                self.note_stop(self.gone_reason(status))
                if wid:
                    await self.release(f"the server is gone ({status})", wid)
            return status
        if self._stopping:
            return None
        why = await self.workload_lost()
        if why is None:
            return None
        # Preempted or evicted: the GPUs are someone else's now.
        self.note_stop(why)
        await self.stop()
        return 1

    def gone_reason(self, status: int) -> str:
        """Why a server nobody stopped ended (a spawner that can tell an
        out-of-memory kill says so)."""
        return exit_reason(status)

    # Who asked the hub to stop the server: (name, "user" or "service", what
    # they said), set by the hub's handler (hub/app.py) just before the stop.
    _stop_request: Optional[tuple] = None

    async def stop_and_release(self, base_stop) -> None:
        request, self._stop_request = self._stop_request, None
        try:
            self.note_stop(requested_reason(*request, owner=self.user.name) if request
                           else "the hub stopped it (the hub was shut down, or its start failed)")
        except Exception:  # telling why never keeps a server from stopping
            self.log.exception("could not record why %s stopped", self._log_name)
        wid = self.workload_id
        self._stopping = True
        try:
            await base_stop()
        finally:
            self._stopping = False
        await self.release("the server stopped", wid)
