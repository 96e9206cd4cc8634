"""The admission path both GPU spawners share.

A notebook server that wants GPUs is a workload: before the server starts,
the spawner asks the scheduler service for them (on the user's behalf, with
the spawner's own token), waits in the queue while the progress page says
why, and starts the server on exactly the GPUs it was given. When the server
stops, crashes or is culled, the spawner releases the workload (the service
makes that idempotent, so it happens once). A CPU-only server is a
workload too (0 GPUs): the scheduler admits its CPUs and memory against its
node and its team's quota, and usage counts them
(``GPUSpawnerMixin.admit_cpu_only``).
"""
from __future__ import annotations

import asyncio
import os
from typing import Optional

from tornado import web
from traitlets import Bool, Float, Unicode, default
from traitlets.config import Configurable

from ..client.aio import AsyncApi
from ..client.errors import ApiError
from ..client.tornado_api import TornadoApi
from ..vocab.datasets import MOUNT_ROOT

from .datasets import parse_datasets, readable, refusal, render_choices
from .options import GpuRequest, OptionsError, offers, parse_options, render_form
from .stop_reason import StopReasonMixin, exit_reason, note_stop_requests, requested_reason

RUNNING = "running"
QUEUED = "queued"


note_stop_requests()  # the hub's stops then say by whom (stop_reason.py)


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

    admit_cpu_only = Bool(True, help="""
        A server without GPUs asks the scheduler too (a workload of 0 GPUs),
        so its CPUs and memory (``WorkloadResources.notebook``) count
        against its node's capacity and its team's CPU and memory quota, and
        show in usage; it may wait in the queue when they are full. False:
        CPU-only servers start at once, uncounted.
        """).tag(config=True)

    # ---- state that belongs to one spawn ------------------------------
    workload_id: Optional[str] = None
    devices: Optional[list] = None
    device_uuids: Optional[list] = None
    gpu_request: Optional[GpuRequest] = None
    # What a share's processes are told of it (its memory, MPS): the
    # service's share_env, read at admission for the server's start.
    share_env: Optional[dict] = None
    # The datasets this server reads: (name, folder), as the service gave
    # them at its start (checked again there, the use audited).
    datasets: tuple = ()

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
        self.datasets = ()
        self._progress_messages = []

    # ---- talking to the service ---------------------------------------
    @property
    def gpuhub_api(self) -> AsyncApi:
        """The service's API (the generated client, over tornado's HTTP client)."""
        if not self.gpuhub_api_url:
            raise ApiError(0, "GPUSpawnerMixin.gpuhub_api_url is not set")
        return TornadoApi(self.gpuhub_api_url, self.gpuhub_token)

    def _teams(self) -> list[str]:
        prefix = self.team_group_prefix
        return sorted(g.name[len(prefix):] for g in self.user.groups
                      if g.name.startswith(prefix) and len(g.name) > len(prefix))

    async def _offers(self):
        api = self.gpuhub_api
        pools = (await api.list_pools())["pools"]
        every = (await api.list_teams())["teams"]
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
        form = render_form(self._offers_seen, admin_fix_url=(
            f"{base}services/gpuhub/admin/teams" if self.user.admin else ""))
        # The spawner's token lists every dataset: those the user's teams may read.
        teams = list(self._offers_seen)
        try:
            every = (await self.gpuhub_api.list_datasets())["datasets"]
        except ApiError as e:  # the form still starts servers, without datasets to pick
            self.log.warning("spawn form: no datasets listed: %s", e)
            every = []
        self._datasets_seen = readable(every, teams)
        return form + render_choices(self._datasets_seen, teams)

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
            datasets = parse_datasets(formdata)
        except OptionsError as e:
            raise ValueError(e.message if e.field == "gpus" else str(e))
        # Refused on the form, with the service's words (it checks again at the submit).
        why = refusal(datasets, getattr(self, "_datasets_seen", []), request.team, request.pool)
        if why:
            raise web.HTTPError(403, f"datasets: {why}")
        return {"team": request.team, "pool": request.pool, "gpus": request.gpus,
                **({"gpu_share": str(request.share)} if request.share else {}),
                **({"datasets": list(datasets)} if datasets else {})}

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
            datasets = parse_datasets(self.user_options or {})
        except OptionsError as e:
            raise web.HTTPError(400, str(e))
        self.gpu_request = request
        # Datasets are checked by the service: a server with any is a workload.
        if request.cpu_only and not self.admit_cpu_only and not datasets:
            self.devices, self.device_uuids = [], []
            return None
        api = self.gpuhub_api
        w = await self._submit(api, request, datasets)
        self.workload_id = w["id"]
        want = request.wanted()
        self._say(f"asked the scheduler for {want} for team {request.team}")
        last = None
        try:
            first = True
            while True:
                # A long poll: the service answers when the scheduler admits it
                # (or after the poll interval), not a poll interval late.
                wait = {} if first else {"wait_while": QUEUED, "timeout": min(
                    5, max(1, int(self.queue_poll_interval)))}
                first = False
                w = await api.get_workload(self.workload_id, **wait)
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
            if datasets:
                self.datasets = await self._dataset_folders()
        except BaseException:
            await self.release("the spawn was cancelled or failed while queued")
            raise
        self.devices = w.get("devices", [])
        self.device_uuids = w.get("device_uuids", [])
        self.share_env = dict(w.get("share_env") or {})
        held = w.get("share_enforcement")
        devices = f" (devices {', '.join(map(str, self.devices))})" if self.devices else ""
        self._say(f"got {want}{devices}"
                  + (f"; compute {held['compute']}" if held else "") + "; starting the server", 50)
        return w

    async def _submit(self, api: AsyncApi, request: GpuRequest, datasets: tuple) -> dict:
        """The server's workload, queued; the service's refusal (a dataset
        the team may not read, say) is the spawn's, as the service says it."""
        try:
            return await api.submit_workload({
                "kind": "notebook", "user": self.user.name, "team": request.team,
                "pool": request.pool, "gpus_per_node": request.gpus, "name": self.name,
                **({"gpu_share": str(request.share)} if request.share else {}),
                **({"datasets": list(datasets)} if datasets else {})})
        except ApiError as e:
            if not 400 <= e.status < 500:
                raise
            raise web.HTTPError(e.status, f"the scheduler refused this server: {e}") from None

    async def _dataset_folders(self) -> tuple:
        """The running workload's datasets as (name, folder): the service
        checks them again (a share revoked while it waited) and audits the use."""
        try:
            answer = await self.gpuhub_api.mount_server_datasets(self.workload_id)
        except ApiError as e:
            if not 400 <= e.status < 500:
                raise
            raise web.HTTPError(e.status, f"the server cannot start: {e}") from None
        return tuple((d["name"], d["path"]) for d in answer["datasets"])

    async def release(self, reason: str, wid: Optional[str] = None) -> None:
        """Give the workload's GPUs back (``wid``: one remembered by a caller
        whose base class cleared the state first)."""
        wid = wid or self.workload_id
        self.workload_id = None
        if not wid:
            return
        self.log.info("releasing %s's workload %s: %s", self._log_name, wid, reason)
        try:
            # (the service keeps 1,000 characters; what someone said may be longer)
            await self.gpuhub_api.release_workload(wid, {"reason": reason[:1000]})
        except ApiError as e:
            # The server is gone either way; the service finds such workloads
            # itself (GpuHubService.reconcile_interval) and releases them.
            if e.status != 404:
                self.log.error("could not release workload %s now: %s", wid, e)

    async def workload_lost(self) -> Optional[str]:
        """Why the server must stop (its GPUs were reclaimed), or None."""
        if not self.workload_id:
            return None
        try:
            w = await self.gpuhub_api.get_workload(self.workload_id)
        except ApiError as e:
            if e.status == 404:
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
        if self.datasets:
            env["GPUHUB_DATASETS_DIR"] = MOUNT_ROOT
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
                why = self.gone_reason(status)
                self.note_stop(why)
                if wid:  # the service's record says why, as the hub's page does
                    await self.release(f"the server is gone ({status}): {why}", wid)
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
        why = ""
        try:
            why = (requested_reason(*request, owner=self.user.name) if request
                   else "the hub stopped it (the hub was shut down, or its start failed)")
            self.note_stop(why)
        except Exception:  # telling why never keeps a server from stopping
            self.log.exception("could not record why %s stopped", self._log_name)
        wid = self.workload_id
        self._stopping = True
        try:
            await base_stop()
        finally:
            self._stopping = False
        why = self.stop_reason or why  # the first reason of the run stands (a preemption's)
        await self.release(f"the server stopped: {why}" if why else "the server stopped", wid)
