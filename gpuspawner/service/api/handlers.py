"""Thin tornado handlers: authenticate, validate, call the engine, map domain
errors to status codes. No scheduling logic lives here."""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from tornado.iostream import StreamClosedError

from gpuspawner.safefiles import read_own
from gpuspawner.store import Attempt, WorkloadRow
from gpuspawner.service.workloads import env_access
from gpuspawner.service.access import job_scope
from gpuspawner.service.workloads import queries
from gpuspawner.service.workloads import views
from gpuspawner.service.errors import Conflict
from gpuspawner.scheduler.kinds import KINDS, kind
from gpuspawner.vocab.shares import share_env
from gpuspawner.vocab.specs import SpecError, parse_workload
from gpuspawner.vocab.states import FINAL_STATES, QUEUED, RUNNING, STATES
from gpuspawner.service.api.base import APIHandler, encode_json


class MeHandler(APIHandler):
    def get(self):
        who = self.identity
        self.write_json({"name": who.name, "teams": sorted(who.teams), "leads": sorted(who.leads),
                         "admin": who.admin, "can_submit": who.can_submit,
                         "workspace": self.engine.launcher.workspace_path(who.name)})


def detail_view(row: WorkloadRow, attempts: list[Attempt], env_values: bool) -> dict:
    """What ``detailed`` shows of the rows alone (pure: a worker thread may make it)."""
    out = views.workload(row, attempts[-1] if attempts else None, env_values=env_values)
    out["attempts"] = [views.attempt_view(a) for a in attempts]
    return out


def detailed(engine, row: WorkloadRow, attempts: list[Attempt], env_values: bool,
             positions: Optional[dict[str, int]] = None, base: Optional[dict] = None) -> dict:
    """A workload with its attempts, the host devices it holds and its place
    in the queue (``GET /workloads/{id}``, and the list with ``detail=1``,
    which gives every listed one's place: ``positions``). ``base``: its
    ``detail_view``, if already made."""
    out = base if base is not None else detail_view(row, attempts, env_values)
    if "placement" in out:
        placement = [(p["node"], p["devices"]) for p in out["placement"]]
        out["devices"] = engine.launcher.devices(placement)
        out["device_uuids"] = engine.launcher.device_uuids(placement)
        if row.gpu_share and row.state == RUNNING:
            # What a share's processes are told of it (a server's spawner sets
            # it), and what holds it.
            enforced = engine.launcher.share_enforcement(row, engine.launcher.attempt_dir(
                row.id, row.attempt))
            out["share_env"] = {**share_env(row.gpu_share, engine.pool_sharing(row.pool)),
                                **(enforced.env if enforced else {})}
            if enforced is not None:
                out["share_enforcement"] = {**enforced.labels, "notes": enforced.notes}
    if row.state == QUEUED:
        position = (positions.get(row.id) if positions is not None
                    else queries.queue_position(engine.scheduler.state, row.id))
        if position is not None:  # None while the core has yet to hear of its requeue
            out["queue_position"] = position
        out["expected_start"] = engine.estimates.view(row.id)
    return out


# The threads the lists are read, viewed and encoded in. On SQLite one, so
# that reads queue there instead of each taking the interpreter from the
# event loop. On PostgreSQL a page is mostly waiting on the server, which
# several reads can do at once (`gpuhub bench api --db postgresql`, the Jobs
# panel with 10,000 queued: 147 -> 174 pages/s).
READS = ThreadPoolExecutor(1, thread_name_prefix="gpuhub-reads")
SERVER_READS = ThreadPoolExecutor(4, thread_name_prefix="gpuhub-server-reads")
# The most rows of a page read or encoded on the event loop itself; a longer
# page is read and encoded in ``reads_for``'s threads.
ON_THE_LOOP = 100


def read_on_the_loop(store, limit: int) -> bool:
    """Whether a list page of at most ``limit`` rows is read on the event
    loop: on SQLite a page of 50 is ~2 ms of the interpreter, less than the
    trip to the reads thread and back costs under load (`gpuhub bench api`:
    the Jobs panel's list 183 -> 245 requests/s with 10,000 queued), and the
    file does not keep the loop waiting. PostgreSQL's round trips, and long
    pages, go to the reads thread."""
    return store.engine.dialect.name == "sqlite" and limit <= ON_THE_LOOP


def reads_for(store) -> ThreadPoolExecutor:
    """The threads a page that is not read on the loop is read in."""
    return READS if store.engine.dialect.name == "sqlite" else SERVER_READS


class WorkloadsHandler(APIHandler):
    async def get(self):
        filters = {name: self.get_arguments(name) for name in queries.LIST_FILTERS}
        for name, known in (("kind", KINDS), ("state", STATES)):
            bad = sorted(set(filters[name]) - set(known))
            if bad:
                raise SpecError(name, f"unknown {name} {bad[0]!r}; known: {', '.join(known)}")
        limit = self.int_arg("limit", 100, 1, 1000)
        detail = self.get_argument("detail", "0")
        if detail not in ("0", "1"):
            raise SpecError("detail", "must be 0 or 1")
        cursor = self.get_argument("cursor", None)
        # What the core knows (queue places, estimates, devices) is added
        # here, on the loop that owns the core; the rows are read and viewed
        # here too, or in the reads thread (``read_on_the_loop``).
        loop = asyncio.get_running_loop()
        if read_on_the_loop(self.engine.store, limit):
            rows, attempts, after, shown = self._page(filters, limit, detail == "1", cursor)
        else:
            rows, attempts, after, shown = await loop.run_in_executor(
                reads_for(self.engine.store), self._page, filters, limit, detail == "1", cursor)
        if detail == "0":
            for row, out in zip(rows, shown):
                if row.state == QUEUED:
                    out["expected_start"] = self.engine.estimates.view(row.id)
            page = {"workloads": shown, "next_cursor": after}
        else:
            positions = queries.queue_positions(self.engine.scheduler.state,
                                                {r.id for r in rows if r.state == QUEUED})
            page = {"workloads": [
                detailed(self.engine, r, attempts.get(r.id, []), r.user == self.identity.name,
                         positions, base=out) for r, out in zip(rows, shown)],
                "next_cursor": after}
        if len(rows) > ON_THE_LOOP:  # 1,000 rows are 100s of kB: not on the loop
            self.finish(await loop.run_in_executor(reads_for(self.engine.store), encode_json, page))
        else:  # a page of 50 is ~0.1 ms to encode, less than another trip to the thread
            self.finish(encode_json(page))

    def _page(self, filters: dict, limit: int, with_attempts: bool, cursor: Optional[str]):
        """In a worker thread: the page's rows, attempts and next cursor, and
        each row's view. A list shows env values to their owner only (an admin
        reads one workload's, audited): a polling admin's panel writes no
        audit entries."""
        rows, attempts, after = queries.workloads(self.engine.store, self.identity, filters,
                                                  limit, with_attempts=with_attempts,
                                                  cursor=cursor)
        mine = self.identity.name
        if with_attempts:
            shown = [detail_view(r, attempts.get(r.id, []), r.user == mine) for r in rows]
        else:
            shown = [views.workload(r, env_values=r.user == mine) for r in rows]
        return rows, attempts, after, shown

    async def post(self):
        body = self.json_body()
        spec = parse_workload(body, self.gpuhub.limits())
        if self.identity.job is not None and body.get("user") is None:
            row = job_scope.submit_follow_up(self.facades.records, self.facades.submissions,
                                             self.identity, spec,
                                             self.gpuhub.job_token_max_follow_ups,
                                             self.gpuhub.job_token_max_pipeline)
        else:  # stored with the other submits of this turn of the loop (loop/intake.py)
            row = await self.engine.intake.submit(self.identity, spec,
                                                  on_behalf_of=body.get("user"))
        self.set_header("Location", f"{self.gpuhub.api_prefix}workloads/{row.id}")
        self.write_json(views.workload(row, env_values=True), status=201)


class WorkloadHandler(APIHandler):
    async def get(self, wid: str):
        row = queries.get(self.engine.store, self.identity, wid)
        # A long poll (the spawner's): answer once it is no longer in the
        # state ``wait_while`` names, or after ``timeout`` seconds.
        waiting = self.get_argument("wait_while", None)
        timeout = self.int_arg("timeout", 5, 0, 5)
        if waiting is not None:
            if waiting not in STATES:
                raise SpecError("wait_while", f"unknown state {waiting!r}; known: "
                                              f"{', '.join(STATES)}")
            deadline = time.monotonic() + timeout
            # A workload that has ended stays so: no waiting on it.
            while row.state == waiting and row.state not in FINAL_STATES \
                    and time.monotonic() < deadline:
                await self.gpuhub.cycle_done(deadline - time.monotonic())
                row = queries.get(self.engine.store, self.identity, wid)
        env_access.audit_read(self.facades.records, self.identity, row)
        self.write_json(detailed(self.engine, row, queries.attempts_of(self.engine.store, wid),
                                 env_access.shows(self.identity, row.user)))

    def delete(self, wid: str):
        row = self.engine.cancel(self.identity, wid)
        self.write_json(views.workload(row, env_values=row.user == self.identity.name), status=202)


class CancelHandler(APIHandler):
    def post(self, wid: str):
        row = self.engine.cancel(self.identity, wid)
        self.write_json(views.workload(row, env_values=row.user == self.identity.name), status=202)


class ReleaseHandler(APIHandler):
    """The spawner reports a notebook server stopped (or crashed, or culled)."""

    def post(self, wid: str):
        body = self.json_body() if self.request.body else {}
        if not isinstance(body, dict) or set(body) - {"reason"}:
            raise SpecError("body", "must be a JSON object with at most a 'reason'")
        why = body.get("reason", "")
        if not isinstance(why, str) or len(why) > 1000:
            raise SpecError("reason", "must be a string of at most 1000 characters")
        row = self.engine.release(self.identity, wid, why)
        self.write_json(views.workload(row, env_values=row.user == self.identity.name))


class EventsHandler(APIHandler):
    def get(self, wid: str):
        queries.get(self.engine.store, self.identity, wid)
        self.write_json({"events": [views.event(e)
                                    for e in queries.events_of(self.engine.store, wid)]})


class LogsHandler(APIHandler):
    """The output of one attempt (the latest by default); with ``follow``,
    a server-sent event stream that ends when the attempt does."""

    async def get(self, wid: str):
        row = queries.get(self.engine.store, self.identity, wid)
        attempt = self.int_arg("attempt", row.attempt, 0, row.attempt)
        follow = {"true": True, "false": False}.get(self.get_argument("follow", "false"))
        if follow is None:
            raise SpecError("follow", "must be true or false")
        if not kind(row.kind).run_by_backend:
            raise Conflict(f"workload {wid} is a {row.kind} server, run by the hub's spawner: "
                           f"its output is in the server's own log, not here")
        path = self.engine.backend.log_path(self.engine.launcher.attempt_dir(wid, attempt))
        if not follow and "text/event-stream" not in self.request.headers.get("Accept", ""):
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(_read_from(path, 0))
            return
        await self._stream(wid, attempt, path)

    async def _stream(self, wid: str, attempt: int, path: str) -> None:
        metrics = self.engine.metrics
        if metrics is not None:
            metrics.log_follows.inc()
        self.engine.backend.log_followed(wid, attempt, True)
        try:
            await self._follow(wid, attempt, path)
        finally:
            self.engine.backend.log_followed(wid, attempt, False)
            if metrics is not None:
                metrics.log_follows.dec()

    async def _follow(self, wid: str, attempt: int, path: str) -> None:
        self.set_header("Content-Type", "text/event-stream")
        offset = int(self.request.headers.get("Last-Event-ID") or 0)
        deadline = time.monotonic() + self.gpuhub.log_follow_timeout
        while True:
            chunk = _read_from(path, offset)
            if chunk:
                offset += len(chunk)
                text = chunk.decode("utf-8", "replace")
                self.write(f"id: {offset}\nevent: log\ndata: {json.dumps({'text': text})}\n\n")
            state = queries.attempt_state(self.engine.store, wid, attempt)
            try:
                if state not in ("running", "queued", "waiting") and not chunk:
                    self.write(f"event: end\ndata: {json.dumps({'attempt_state': state})}\n\n")
                    await self.flush()
                    break
                await self.flush()
            except StreamClosedError:
                return
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25 if chunk else 0.5)
        self.finish()


def _read_from(path: str, offset: int) -> bytes:
    # In a directory the job can write to: only the backend's own log file
    # is read, never a link or FIFO the job left in its place.
    return read_own(path, offset) or b""


