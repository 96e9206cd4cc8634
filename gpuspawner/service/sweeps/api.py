"""REST handlers of sweeps. Thin: parse, call ``sweeps``, answer."""
from __future__ import annotations

from gpuspawner.service.sweeps import sweeps
from gpuspawner.service.api.base import APIHandler
from gpuspawner.vocab.sweeps import parse_sweep


class SweepsHandler(APIHandler):
    def get(self):
        states = sweeps.parse_states(self.get_arguments("state"))
        limit = self.int_arg("limit", 100, 1, 1000)
        self.write_json({"sweeps": sweeps.listed(self.facades, self.identity,
                                                 self.get_arguments("team"), states, limit)})

    def post(self):
        sweep = parse_sweep(self.json_body(), self.gpuhub.limits())
        row = sweeps.submit(self.facades, self.identity, sweep)
        self.set_header("Location", f"{self.gpuhub.api_prefix}sweeps/{row.id}")
        self.write_json(sweeps.get(self.facades, self.identity, row.id), status=201)


class SweepHandler(APIHandler):
    def get(self, sid: str):
        self.write_json(sweeps.get(self.facades, self.identity, sid))


class SweepCancelHandler(APIHandler):
    def post(self, sid: str):
        sweeps.cancel(self.facades, self.identity, sid)
        self.write_json(sweeps.get(self.facades, self.identity, sid), status=202)


class SweepRetryHandler(APIHandler):
    def post(self, sid: str):
        sweeps.retry(self.facades, self.identity, sid)
        self.write_json(sweeps.get(self.facades, self.identity, sid), status=202)
