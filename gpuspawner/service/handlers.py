"""Thin tornado handlers: authenticate, validate, call the engine, map domain
errors to status codes. No scheduling logic lives here."""
from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import re
import time
from typing import Any, Optional

from jupyterhub.services.auth import HubOAuthenticated, UserNotAllowed
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from tornado import web
from tornado.iostream import StreamClosedError

from ..safefiles import read_own
from ..scheduler.model import Quota
from ..store import Attempt, WorkloadRow
from . import env_access, job_scope, operations, queries, share_enforce, views
from .accounting import to_csv
from .errors import Conflict, Forbidden, NotFound
from .identity import Identity
from .kinds import KINDS, kind
from .share_specs import share_env
from .specs import SpecError, parse_workload
from .states import FINAL_STATES, QUEUED, RUNNING, STATES
from .usage import culls, usage_report


class ServiceAccess:
    """What every handler of the service reaches: the engine and the app."""

    @property
    def engine(self):
        return self.settings["engine"]

    @property
    def gpuhub(self):
        return self.settings["gpuhub"]


class JSONErrors(web.RequestHandler):
    """Errors as the API's JSON ``{"status", "error", "field"?}``; a 405
    says in ``Allow`` which methods the route has."""

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        body: dict[str, Any] = {"status": status_code}
        if isinstance(exc, SpecError):
            body["error"], body["field"] = str(exc), exc.field
        elif type(exc) in DOMAIN_ERRORS:
            body["error"] = str(exc)
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            body["error"] = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            body["error"] = self._reason
        if status_code == 405:
            allowed = allowed_methods(type(self))
            self.set_header("Allow", ", ".join(allowed))
            body["error"] = (f"method {self.request.method} is not allowed here; allowed: "
                             f"{', '.join(allowed) or 'none'}")
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        if status_code == 503:
            self.set_header("Retry-After", "5")
        self.finish(json.dumps(body))

    def _handle_request_exception(self, e: BaseException) -> None:
        if isinstance(e, SpecError):
            self.send_error(e.status, exc_info=(type(e), e, e.__traceback__))
        elif type(e) in DOMAIN_ERRORS:
            self.send_error(DOMAIN_ERRORS[type(e)], exc_info=(type(e), e, e.__traceback__))
        else:
            super()._handle_request_exception(e)


def allowed_methods(handler: type) -> list[str]:
    """The HTTP methods a handler class implements."""
    return [m.upper() for m in ("get", "post", "put", "patch", "delete")
            if getattr(handler, m) is not getattr(web.RequestHandler, m)]


class NoRouteHandler(JSONErrors):
    """Any path under the API that no route matches (a path parameter
    outside its pattern included): a JSON 404, not tornado's HTML page."""

    def prepare(self) -> None:
        raise web.HTTPError(404, f"no such API path: {self.request.path}")


# What a token with only custom:gpuhub:invoke hears on every route but the
# endpoints (the API, the overview and the admin panel alike).
INVOKE_ONLY_REFUSAL = ("this token may only call model endpoints (custom:gpuhub:invoke); "
                       "this route needs custom:gpuhub:submit")


async def hub_user(handler) -> Optional[dict]:
    """Who the request's token or cookie is, asked of the hub (cached for
    ``token_cache_seconds``). A hub that does not answer, or fails, is 503
    (the API adds Retry-After): the hub is restarting, nothing is wrong with
    the request."""
    try:
        return await handler.hub_auth.get_user(handler, sync=False)
    except web.HTTPError as e:
        if e.status_code not in (500, 502):
            raise
        raise web.HTTPError(503, "the hub is not answering, so the token cannot be checked; "
                                 "try again in a few seconds")


class APIHandler(ServiceAccess, HubOAuthenticated, JSONErrors):
    # Whether a token with only custom:gpuhub:invoke may use the route.
    invoke_route = False

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")

    def get_login_url(self):
        raise web.HTTPError(401, "authentication required: send 'Authorization: token <TOKEN>'")

    async def prepare(self) -> None:
        # The body as received: a Content-Length header, or none with
        # Transfer-Encoding: chunked (the HTTP server's own limit is higher,
        # so that this answers with a 413 that says so).
        size = len(self.request.body)
        if size > self.gpuhub.max_body_size:
            raise web.HTTPError(413, f"request body of {size} bytes is larger than the "
                                     f"{self.gpuhub.max_body_size} allowed")
        for name, values in self.request.query_arguments.items():
            if "\x00" in name or any(b"\x00" in v for v in values):
                raise SpecError(name, "must not contain NUL characters")
        model = await hub_user(self)
        try:
            self._hub_auth_user_cache = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            raise web.HTTPError(403, "this token may not use the gpuhub service "
                                     "(needs access:services!service=gpuhub)")
        if self._hub_auth_user_cache is None:
            raise web.HTTPError(401, "authentication required: send 'Authorization: token <TOKEN>'")
        if self._hub_auth_user_cache.get("kind") == "user":
            groups = await self.gpuhub.hub.groups_of(self._hub_auth_user_cache)
        else:
            groups = []
        self.identity: Identity = self.gpuhub.identity(self._hub_auth_user_cache, groups)
        if self.identity.invoke_only and not self.invoke_route:
            raise web.HTTPError(403, INVOKE_ONLY_REFUSAL)
        job = await self.gpuhub.hub.job_of_token(self._hub_auth_user_cache)
        if job is not None:  # a job's own token: only what job_scope.ALLOWED lets it
            self.identity = dataclasses.replace(self.identity, job=job)
            job_scope.check(self.engine.store, job, self.identity.name, self.request.method,
                            type(self), self.path_args)

    def json_body(self) -> Any:
        return parse_json_body(self.request.body)

    def int_arg(self, name: str, default: int, low: int, high: int) -> int:
        """A whole-number query argument in [low, high]."""
        value = self.get_argument(name, None)
        if value is None:
            return default
        if not re.fullmatch(r"[0-9]{1,12}", value) or not low <= int(value) <= high:
            raise SpecError(name, f"must be a whole number from {low} to {high}, got {value!r}")
        return int(value)

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.finish(json.dumps(data))


DOMAIN_ERRORS = {NotFound: 404, Forbidden: 403, Conflict: 409}
# Deeper than any request of this API needs; far below Python's recursion limit.
MAX_JSON_DEPTH = 64


def _no_constant(name: str):
    raise SpecError("body", f"{name} is not a JSON number")


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON, refusing what JSON does not have (NaN,
    Infinity, numbers too large for a float), NUL characters (PostgreSQL
    stores no NUL) and nesting deeper than ``MAX_JSON_DEPTH``."""
    try:
        body = json.loads(raw or b"null", parse_constant=_no_constant)
    except RecursionError:
        raise SpecError("body", f"is nested more than {MAX_JSON_DEPTH} levels deep")
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, SpecError):
            raise
        raise SpecError("body", f"is not valid JSON: {e}")
    stack = [(body, "body", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise SpecError("body", f"is nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(value, str):
            if "\x00" in value:
                raise SpecError(where, "must not contain NUL characters")
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise SpecError(where, "must be a finite number")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = key if where == "body" else f"{where}.{key}"
                if "\x00" in key:
                    raise SpecError(where, "must not have a key with NUL characters")
                stack.append((item, name, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
    return body


class MeHandler(APIHandler):
    def get(self):
        who = self.identity
        self.write_json({"name": who.name, "teams": sorted(who.teams), "leads": sorted(who.leads),
                         "admin": who.admin, "can_submit": who.can_submit,
                         "workspace": self.engine.launcher.workspace_path(who.name)})


def detailed(engine, row: WorkloadRow, attempts: list[Attempt], env_values: bool) -> dict:
    """A workload with its attempts, the host devices it holds and its place
    in the queue (``GET /workloads/{id}``, and the list with ``detail=1``)."""
    out = views.workload(row, attempts[-1] if attempts else None, env_values=env_values)
    out["attempts"] = [views.attempt_view(a) for a in attempts]
    if "placement" in out:
        placement = [(p["node"], p["devices"]) for p in out["placement"]]
        out["devices"] = engine.launcher.devices(placement)
        out["device_uuids"] = engine.launcher.device_uuids(placement)
        if row.gpu_share and row.state == RUNNING:
            # What a share's processes are told of it (a server's spawner sets
            # it), and what holds it.
            enforced = share_enforce.decide(engine, row, engine.launcher.attempt_dir(
                row.id, row.attempt))
            out["share_env"] = {**share_env(row.gpu_share, engine.pool_sharing(row.pool)),
                                **(enforced.env if enforced else {})}
            if enforced is not None:
                out["share_enforcement"] = {**enforced.labels, "notes": enforced.notes}
    if row.state == QUEUED:
        out["queue_position"] = queries.queue_position(engine.scheduler.state, row.id)
        out["expected_start"] = engine.estimates.view(row.id)
    return out


class WorkloadsHandler(APIHandler):
    def get(self):
        filters = {name: self.get_arguments(name) for name in queries.LIST_FILTERS}
        for name, known in (("kind", KINDS), ("state", STATES)):
            bad = sorted(set(filters[name]) - set(known))
            if bad:
                raise SpecError(name, f"unknown {name} {bad[0]!r}; known: {', '.join(known)}")
        limit = self.int_arg("limit", 100, 1, 1000)
        detail = self.get_argument("detail", "0")
        if detail not in ("0", "1"):
            raise SpecError("detail", "must be 0 or 1")
        rows, attempts = queries.workloads(self.engine.store, self.identity, filters, limit,
                                           with_attempts=detail == "1")
        # A list shows env values to their owner only (an admin reads one
        # workload's, audited): a polling admin's panel writes no audit entries.
        if detail == "0":
            self.write_json({"workloads": [self._listed(r) for r in rows]})
        else:
            self.write_json({"workloads": [detailed(self.engine, r, attempts.get(r.id, []),
                                                    r.user == self.identity.name) for r in rows]})

    def _listed(self, row: WorkloadRow) -> dict:
        out = views.workload(row, env_values=row.user == self.identity.name)
        if row.state == "queued":
            out["expected_start"] = self.engine.estimates.view(row.id)
        return out

    def post(self):
        body = self.json_body()
        spec = parse_workload(body, self.gpuhub.limits())
        if self.identity.job is not None and body.get("user") is None:
            row = job_scope.submit_follow_up(self.engine, self.identity, spec,
                                             self.gpuhub.job_token_max_follow_ups,
                                             self.gpuhub.job_token_max_pipeline)
        else:
            row = self.engine.submit(self.identity, spec, on_behalf_of=body.get("user"))
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
        env_access.audit_read(self.engine, self.identity, row)
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


class PoolsHandler(APIHandler):
    def get(self):
        self.write_json({"pools": queries.pools_view(self.engine, self.identity)})


class TeamsHandler(APIHandler):
    def get(self):
        self.write_json({"teams": queries.teams_view(self.engine, self.identity)})


class TeamHandler(APIHandler):
    def get(self, name: str):
        teams = [t for t in queries.teams_view(self.engine, self.identity) if t["name"] == name]
        if not teams:
            raise NotFound(f"no team {name}")
        self.write_json(teams[0])

    def put(self, name: str):
        if not self.identity.admin:
            raise Forbidden("changing teams and quotas needs the scope custom:gpuhub:admin")
        weight, quotas = parse_team(self.json_body())
        warnings = operations.set_team(self.engine, self.identity, name, weight, quotas)
        team = next(t for t in queries.teams_view(self.engine, self.identity) if t["name"] == name)
        self.write_json({**team, "warnings": warnings})

    patch = put


def parse_team(body: Any) -> tuple[Optional[float], dict[str, Quota]]:
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object with 'quotas' and/or 'weight'")
    unknown = sorted(set(body) - {"quotas", "weight"})
    if unknown:
        raise SpecError(unknown[0], "is not a known field; known fields: quotas, weight")
    weight = body.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not 0 < weight <= 1000):
        raise SpecError("weight", f"must be a number in (0, 1000], got {weight!r}")
    quotas = {}
    raw = body.get("quotas", {})
    if not isinstance(raw, dict):
        raise SpecError("quotas", "must be an object of pool: {nominal, borrowing_limit, lending_limit}")
    for pool, q in raw.items():
        if not isinstance(q, dict):
            raise SpecError(f"quotas.{pool}", "must be an object")
        extra = sorted(set(q) - {"nominal", "borrowing_limit", "lending_limit"})
        if extra:
            raise SpecError(f"quotas.{pool}.{extra[0]}", "is not a known field")
        values = {}
        for key in ("nominal", "borrowing_limit", "lending_limit"):
            v = q.get(key, 0 if key == "nominal" else None)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0
                                  or v > 1_000_000):
                raise SpecError(f"quotas.{pool}.{key}", f"must be a non-negative integer"
                                f"{'' if key == 'nominal' else ' or null'}, got {v!r}")
            values[key] = v
        quotas[pool] = Quota(**values)
    return (float(weight) if weight is not None else None), quotas


class UsageHandler(APIHandler):
    """GPU-hours and cost per group over a window; ``format=csv`` for finance."""

    def get(self):
        now = self.engine.clock()
        start = parse_time(self.get_argument("from", None), "from", now - 30 * 86400)
        end = parse_time(self.get_argument("to", None), "to", now)
        if end < start:
            raise SpecError("to", "must not be before 'from'")
        fmt = self.get_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise SpecError("format", f"must be json or csv, got {fmt!r}")
        group_by = self.get_argument("group_by", "team")
        teams = None if self.identity.admin else sorted(self.identity.teams | self.identity.leads)
        with self.engine.store.session() as s:
            report = usage_report(s, start, end, now, group_by, teams,
                                  self.get_argument("series_by", ""))
            if self.identity.admin:
                report["culler"] = culls(s, start, end)
        report["currency"] = self.gpuhub.currency
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="gpuhub-usage.csv"')
            self.finish(to_csv(report["rows"], report["group_by"], self.gpuhub.currency))
            return
        self.write_json(report)


# An ISO date, or date and time (UTC unless it says otherwise).
ISO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
                      r"(Z|[+-][0-9]{2}:[0-9]{2})?)?")
# The times the API shows as ISO dates: from the epoch to the end of year 9999.
LATEST_TIME = 253402300799.0


def check_time(seconds: Any, name: str) -> float:
    """A UNIX time in seconds that an ISO date can show."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 <= seconds <= LATEST_TIME:
        raise SpecError(name, f"must be a UNIX time in seconds from 0 to {LATEST_TIME:.0f} "
                              f"(9999-12-31), got {seconds!r}")
    return float(seconds)


def parse_time(value: Optional[str], name: str, default: float) -> float:
    """A UNIX time in seconds, an ISO date (``2026-11-01``, midnight UTC) or
    an ISO date and time."""
    if value is None or value == "":
        return default
    if re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,9})?", value):
        return check_time(float(value), name)
    try:
        if not ISO_TIME.fullmatch(value):
            raise ValueError(value)
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(name, f"{value!r} is neither a UNIX time in seconds nor an ISO date "
                              f"such as 2026-11-01 or 2026-11-01T12:00:00Z")
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return check_time(t.timestamp(), name)


class AdminHandler(APIHandler):
    async def prepare(self) -> None:
        await super().prepare()
        if not self.identity.admin:
            raise web.HTTPError(403, "this needs the scope custom:gpuhub:admin")


class GpusHandler(AdminHandler):
    """Every GPU of this host's nodes: utilization now and who holds it (for
    the culler and the metrics)."""

    def get(self):
        self.write_json({"sampled_at": views.iso(self.engine.clock()),
                         "gpus": queries.gpus_view(self.engine, self.gpuhub.gpu_sample())})


def optional(body: dict, key: str, default: Any) -> Any:
    """A field that may be left out or null (then ``default``); any other
    value is the caller's to check (``false`` is not an empty object)."""
    value = body.get(key)
    return default if value is None else value


# A notice's text fields and their longest values (the database's columns).
NOTICE_FIELDS = {"user": 255, "kind": 32, "message": 2000}


class NoticesHandler(APIHandler):
    """Messages for a user's server (the culler's warnings). Users read their
    own; admins (the culler) post and read anyone's."""

    def get(self):
        user = self.get_argument("user", None) if self.identity.admin else self.identity.name
        rows = queries.notices(self.engine.store, user, self.engine.clock())
        self.write_json({"notices": [views.notice(n) for n in rows]})

    def post(self):
        if not self.identity.admin:
            raise Forbidden("posting notices needs the scope custom:gpuhub:admin")
        body = self.json_body()
        if not isinstance(body, dict):
            raise SpecError("body", "must be a JSON object")
        for key, most in NOTICE_FIELDS.items():
            if not isinstance(body.get(key), str) or not body[key] or len(body[key]) > most:
                raise SpecError(key, f"is required: a string of at most {most} characters")
        server = optional(body, "server", "")
        if not isinstance(server, str) or len(server) > 255:
            raise SpecError("server", "must be a string of at most 255 characters")
        expires = body.get("expires_at")
        if expires is not None:
            check_time(expires, "expires_at")
        data = optional(body, "data", {})
        if not isinstance(data, dict):
            raise SpecError("data", "must be an object")
        unknown = sorted(set(body) - {*NOTICE_FIELDS, "server", "expires_at", "data"})
        if unknown:
            raise SpecError(unknown[0], "is not a known field; known fields: user, server, kind, "
                                        "message, expires_at, data")
        row = operations.post_notice(self.engine, self.identity, body["user"], server,
                                     body["kind"], body["message"], expires, data)
        self.write_json(views.notice(row), status=201)


class NoticeHandler(APIHandler):
    def delete(self, nid: str):
        self.write_json(views.notice(operations.clear_notice(self.engine, self.identity,
                                                             int(nid))))


class AuditHandler(AdminHandler):
    """The append-only audit log: read it, or append an entry (a hub-side
    service recording what it did, such as a cull and its reasons)."""

    def get(self):
        limit = self.int_arg("limit", 200, 1, 5000)
        filters = {key: self.get_argument(key, None) for key in queries.AUDIT_FILTERS}
        self.write_json({"entries": [views.audit(a) for a in
                                     queries.audit_entries(self.engine.store, limit, filters)]})

    def post(self):
        body = self.json_body()
        if not isinstance(body, dict) or not isinstance(body.get("action"), str) \
                or not body["action"] or len(body["action"]) > 64:
            raise SpecError("action", "is required: a string of at most 64 characters")
        detail = optional(body, "detail", {})
        if not isinstance(detail, dict):
            raise SpecError("detail", "must be an object")
        target = optional(body, "target", "")
        if not isinstance(target, str) or len(target) > 255:
            raise SpecError("target", "must be a string of at most 255 characters")
        row = operations.record(self.engine, self.identity, body["action"], target, detail)
        self.write_json(views.audit(row), status=201)


class MetricsHandler(APIHandler):
    """Prometheus text format, for a token with JupyterHub's read:metrics
    scope (as the hub's own /hub/metrics) or a GPU Hub admin."""

    def get(self):
        if not (self.identity.admin or "read:metrics" in self.identity.scopes):
            raise Forbidden("metrics need the scope read:metrics")
        metrics = self.engine.metrics
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(metrics.registry))


class OpenAPIHandler(JSONErrors):
    def get(self):
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(self.settings["gpuhub"].openapi()))


class HealthHandler(JSONErrors):
    def get(self):
        queries.database_answers(self.settings["engine"].store)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        # How GPUs and limits are held, and whether users' processes are kept
        # apart (system accounts): a monitor, and the admin panel, can tell an
        # isolated hub from one that only says so.
        gpuhub = self.settings["gpuhub"]
        self.finish(json.dumps({"status": "ok", **gpuhub.enforcement_report(),
                                "users_isolated": gpuhub.users_isolated,
                                "database_warnings": gpuhub.database_warnings}))
