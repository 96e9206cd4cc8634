"""REST handlers of the cluster as users and admins see it: pools, teams and their quotas, usage,
GPUs, notices, the audit log, metrics, the OpenAPI document and health. Thin: parse, call, answer."""
from __future__ import annotations

import json
from typing import Any, Optional

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuspawner.isolation.gpu_rules import LimitError
from gpuspawner.isolation.resources import parse_ceilings
from gpuspawner.scheduler.model import Quota
from gpuspawner.service.workloads import operations
from gpuspawner.service.workloads import queries
from gpuspawner.service.workloads import views
from gpuspawner.service.teams.accounting import to_csv
from gpuspawner.service.teams.storage_quotas import parse_storage_quota
from gpuspawner.service.errors import Forbidden, NotFound
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.teams.usage import culls, usage_report
from gpuspawner.vocab.times import check_time, parse_time
from gpuspawner.service.api.base import APIHandler, AdminHandler, JSONErrors, optional


class PoolsHandler(APIHandler):
    def get(self):
        self.write_json({"pools": queries.pools_view(self.cluster, self.store, self.identity)})


class TeamsHandler(APIHandler):
    def get(self):
        self.write_json({"teams": self.teams_view()})


class TeamHandler(APIHandler):
    def get(self, name: str):
        teams = [t for t in self.teams_view() if t["name"] == name]
        if not teams:
            raise NotFound(f"no team {name}")
        self.write_json(teams[0])

    def put(self, name: str):
        if not self.identity.admin:
            raise Forbidden("changing teams and quotas needs the scope custom:gpuhub:admin")
        body = self.json_body()
        weight, quotas = parse_team(body)
        storage = isinstance(body, dict) and "storage_quota" in body
        size = parse_storage_quota(body["storage_quota"]) if storage else None
        if storage:  # refused before the weight or GPU quotas of the same body are saved
            self.gpuhub.storage_quotas.check(self.steering, self.identity, name)
        warnings = []
        if weight is not None or quotas or not storage:
            warnings = operations.set_team(self.steering, self.identity, name, weight, quotas)
        if storage:
            self.gpuhub.storage_quotas.set(self.steering, self.identity, name, size)
        team = next(t for t in self.teams_view() if t["name"] == name)
        self.write_json({**team, "warnings": warnings})

    patch = put


def parse_team(body: Any) -> tuple[Optional[float], dict[str, Quota]]:
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object with 'quotas', 'weight' and/or "
                                "'storage_quota'")
    unknown = sorted(set(body) - {"quotas", "weight", "storage_quota"})
    if unknown:
        raise SpecError(unknown[0], "is not a known field; known fields: quotas, weight, "
                                    "storage_quota")
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
        extra = sorted(set(q) - {"nominal", "borrowing_limit", "lending_limit", "cpus", "memory"})
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
        try:
            values["cpus"], values["memory"] = parse_ceilings(q, f"quotas.{pool}")
        except LimitError as e:
            field_name, _, message = str(e).partition(": ")
            raise SpecError(field_name, message) from None
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
                                  self.get_argument("series_by", ""),
                                  self.gpuhub.resource_prices())
            if self.identity.admin:
                report["culler"] = culls(s, start, end)
        report["currency"] = self.gpuhub.currency
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="gpuhub-usage.csv"')
            self.finish(to_csv(report["rows"], report["group_by"], self.gpuhub.currency))
            return
        self.write_json(report)


class GpusHandler(AdminHandler):
    """Every GPU of this host's nodes: utilization now and who holds it (for
    the culler and the metrics)."""

    def get(self):
        self.write_json({"sampled_at": views.iso(self.engine.clock()),
                         "gpus": queries.gpus_view(self.cluster, self.store,
                                                   self.gpuhub.gpu_sample())})


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
        row = operations.post_notice(self.steering, self.identity, body["user"], server,
                                     body["kind"], body["message"], expires, data)
        self.write_json(views.notice(row), status=201)


class NoticeHandler(APIHandler):
    def delete(self, nid: str):
        self.write_json(views.notice(operations.clear_notice(self.steering, self.identity,
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
        row = operations.record(self.steering, self.identity, body["action"], target, detail)
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
