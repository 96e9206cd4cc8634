"""The admin panel's Datasets page: every dataset (admins) or those a lead's
teams may read, with its team, size as last measured, shares and residency;
and the form that registers one (``Datasets.create``, the rules of
``POST /datasets``: a lead for their teams, an admin for any)."""
from __future__ import annotations

import re

from gpuspawner.service.datasets.api import dataset_view
from gpuspawner.service.panel.base import PanelHandler
from gpuspawner.vocab.specs import SpecError

FORM_FIELDS = ("name", "path", "team", "node_labels")


def node_labels_typed(text: str) -> dict[str, str]:
    """The form's node labels, ``region=eu, zone=a`` (commas or spaces: no
    label has a space), as the API's object; the registry checks each
    label's spelling."""
    out: dict[str, str] = {}
    for item in filter(None, re.split(r"[,\s]+", text)):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SpecError("node_labels", f"{item!r}: say KEY=VALUE, e.g. region=eu")
        if out.get(key, value) != value:
            raise SpecError("node_labels", f"label {key} given twice ({out[key]} and {value}): "
                                           f"a node has one value per label")
        out[key] = value
    return out


class DatasetsPage(PanelHandler):
    page, audience = "datasets", "lead"

    async def get(self):
        await self.show()

    async def show(self, status: int = 200, **extra):
        datasets = self.gpuhub.datasets
        who = self.identity
        self.render_page(
            "datasets.html", status,
            datasets=[dataset_view(d, datasets.sizes.get(d.name))
                      for d in datasets.listing(who)],
            # whom the form may register for, and share with, and where
            owners=sorted(datasets.teams()) if who.admin else sorted(who.leads),
            all_teams=sorted(datasets.teams()),
            pools=sorted(self.facades.cluster.state.capacity),
            typed=extra.pop("typed", {}), **extra)

    async def post(self):
        typed = {k: self.get_body_argument(k, "").strip() for k in FORM_FIELDS}
        typed["pools"] = self.get_body_arguments("pools")
        typed["shared_with"] = self.get_body_arguments("shared_with")

        def act() -> str:
            body = {"name": typed["name"], "path": typed["path"],
                    "team": typed["team"] or None, "pools": typed["pools"],
                    "shared_with": typed["shared_with"],
                    "node_labels": node_labels_typed(typed["node_labels"])}
            d = self.gpuhub.datasets.create(self.identity, body)
            return (f"dataset {d.name} registered for team {d.team}: a workload that asks for "
                    f"it sees it read-only at /datasets/{d.name}")

        async def again(**kw):
            await self.show(typed=typed, **kw)

        await self.form_action(act, again)
