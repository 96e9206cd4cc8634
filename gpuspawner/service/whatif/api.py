"""REST handlers of the history export and the what-if previews. Thin:
parse, call ``whatif``, answer."""
from __future__ import annotations

import asyncio
import time

from gpuspawner.sim.cluster import cluster_document
from gpuspawner.sim.trace import trace_csv
from gpuspawner.service.workloads import views
from gpuspawner.service.api.base import AdminHandler, APIHandler
from gpuspawner.vocab.specs import SpecError
from gpuspawner.service.whatif.previews import parse_since, read_history

FLAGS = {"true": True, "1": True, "false": False, "0": False}


class TraceExportHandler(AdminHandler):
    """GET /history/trace: the period's submissions as a simulator trace
    (CSV), or with the cluster file as JSON."""

    async def get(self):
        now = self.facades.records.clock()
        since = parse_since(self.get_argument("since", None), now, self.gpuhub.whatif_max_days
                            * 86400)
        fmt = self.get_argument("format", "csv")
        if fmt not in ("csv", "json"):
            raise SpecError("format", f"must be csv (the trace) or json (the trace and the "
                                      f"cluster file), got {fmt!r}")
        flag = self.get_argument("pseudonymise", "false")
        if flag not in FLAGS:
            raise SpecError("pseudonymise", f"must be true or false, got {flag!r}")
        nodes = [ln.node for ln in self.facades.cluster.nodes.values()]
        history, cluster = await asyncio.to_thread(read_history, self.facades.records.store, nodes, since, now,
                                                   FLAGS[flag])
        if fmt == "csv":
            stamp = time.strftime("%Y%m%d", time.gmtime(now))
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", f'attachment; filename="gpuhub-trace-{stamp}.csv"')
            self.finish(trace_csv(history.jobs))
            return
        doc = {"since": views.iso(since), "until": views.iso(now),
               "jobs": [{k: v for k, v in vars(j).items() if v is not None} for j in history.jobs],
               "cluster": cluster_document(cluster), "left_out": history.left_out}
        self.write_json(doc)


def _preview_body(body) -> tuple[str, dict]:
    if not isinstance(body, dict):
        raise SpecError("body", 'must be a JSON object: {"since": "14d", "set": {"team.TEAM.POOL.'
                                'nominal": 4}}')
    unknown = sorted(set(body) - {"since", "set"})
    if unknown:
        raise SpecError(unknown[0], "is not a known field; known fields: since, set")
    since, changes = body.get("since"), body.get("set")
    if not isinstance(since, str):
        raise SpecError("since", f"must be a string such as 14d or 2026-11-01, got {since!r}")
    if not isinstance(changes, dict):
        raise SpecError("set", f"must be an object of setting: value, got {changes!r}")
    return since, changes


class PreviewsHandler(APIHandler):
    async def post(self):
        since, changes = _preview_body(self.json_body())
        previews = self.gpuhub.previews
        row = await previews.start(self.identity, since, changes)
        self.write_json(previews.view(self.identity, row), status=202)


class PreviewHandler(APIHandler):
    def get(self, pid: str):
        previews = self.gpuhub.previews
        self.write_json(previews.view(self.identity, previews.get(self.identity, pid)))


class PreviewCancelHandler(APIHandler):
    def post(self, pid: str):
        previews = self.gpuhub.previews
        self.write_json(previews.view(self.identity, previews.cancel(self.identity, pid)))


class PreviewApplyHandler(APIHandler):
    def post(self, pid: str):
        self.write_json(self.gpuhub.previews.apply(self.identity, pid))
