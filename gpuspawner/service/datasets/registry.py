"""Datasets as the service keeps them: registered by a lead of their team (or
an admin), shared read-only with other teams, deleted; checked when a
workload asks for them (who may read, residency) and again when it starts;
every create, grant, revoke, delete and use is in the audit log. The rules
themselves are vocab/datasets.py's; the mount is isolation/dataset_mounts.py's
(local), the pod's volumes (Kubernetes)."""
from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Optional

from sqlalchemy import delete, select

from gpuspawner.isolation import space_usage
from gpuspawner.isolation.space_usage import Usage
from gpuspawner.scheduler.model import NOTEBOOK, labels_text
from gpuspawner.store import DatasetRow, DatasetShareRow, WorkloadRow
from gpuspawner.service.access.identity import Identity
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.loop import journal
from gpuspawner.service.teams.storage import DATASET, StorageLedger
from gpuspawner.vocab import datasets as rules
from gpuspawner.vocab.specs import SpecError

log = logging.getLogger(__name__)
FIELDS = ("name", "path", "team", "pools", "node_labels", "shared_with")


@dataclass(frozen=True)
class Dataset:
    """A dataset's row and its shares, read in one session."""

    name: str
    team: str
    path: str
    created_by: str
    created_at: float
    pools: tuple[str, ...]
    shared_with: tuple[str, ...]
    # Residency: labels every node its readers run on must carry ({}: any node).
    node_labels: dict[str, str]


class Datasets:
    """The datasets of one service. ``records``: its store and clock;
    ``cluster``: the live pools (residency names them); ``teams``: the teams
    the service knows; ``workspace``: a user's workspace folder; ``roots``:
    the folders an admin allows datasets in besides each registering user's
    workspace and their team's space (``team_dir``)."""

    def __init__(self, records, cluster, teams: Callable[[], list[str]],
                 workspace: Callable[[str], str], roots: Iterable[str] = (),
                 team_dir: Callable[[str], Optional[str]] = lambda team: None,
                 ledger: Optional[StorageLedger] = None):
        self.store, self.clock, self.cluster = records.store, records.clock, cluster
        self.teams, self.workspace = teams, workspace
        self.roots = [os.path.realpath(r) for r in roots if r]
        self.team_dir = team_dir
        self.ledger = ledger or StorageLedger(self.store)  # the service's one (teams/storage.py)

    # ---- reads ------------------------------------------------------------------
    def _load(self, s, rows: Iterable[DatasetRow]) -> list[Dataset]:
        rows = list(rows)
        shares: dict[str, list[str]] = {}
        if rows:
            for share in s.scalars(select(DatasetShareRow).where(
                    DatasetShareRow.dataset.in_([r.name for r in rows]))):
                shares.setdefault(share.dataset, []).append(share.team)
        return [Dataset(r.name, r.team, r.path, r.created_by, r.created_at,
                        tuple(r.pools or ()), tuple(sorted(shares.get(r.name, ()))),
                        dict(r.node_labels or {}))
                for r in rows]

    def find(self, name: str) -> Optional[Dataset]:
        with self.store.session() as s:
            row = s.get(DatasetRow, name)
            return self._load(s, [row])[0] if row is not None else None

    def listing(self, who: Identity) -> list[Dataset]:
        """The datasets ``who`` may read (all of them for an admin), by name."""
        with self.store.session() as s:
            every = self._load(s, s.scalars(select(DatasetRow).order_by(DatasetRow.name)))
        return [d for d in every if rules.sees(who.admin, who.teams | who.leads, d.team,
                                               d.shared_with)]

    def get(self, who: Identity, name: str) -> Dataset:
        """The dataset, if ``who`` may read it; one they may not is not found (404)."""
        found = self.find(rules.parse_name(name))
        if found is None or not rules.sees(who.admin, who.teams | who.leads, found.team,
                                           found.shared_with):
            raise NotFound(f"no dataset {name} that you may read")
        return found

    def _managed(self, who: Identity, name: str) -> Dataset:
        found = self.get(who, name)
        if not rules.may_manage(who.admin, who.leads, found.team):
            raise Forbidden(f"only a lead of team {found.team} or an admin may change dataset "
                            f"{name}")
        return found

    # ---- writes -----------------------------------------------------------------
    def create(self, who: Identity, body: Any) -> Dataset:
        if not isinstance(body, dict):
            raise SpecError("body", "must be a JSON object")
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise SpecError(unknown[0], f"is not a known field; known fields: {', '.join(FIELDS)}")
        name = rules.parse_name(body.get("name"))
        team = self._owner(who, body.get("team"))
        path = self._folder(who, team, body.get("path"))
        pools = rules.parse_pools(body.get("pools"), self.cluster.state.capacity)
        node_labels = rules.parse_node_labels(body.get("node_labels"))
        shared = self._teams(body.get("shared_with"), team)
        now = self.clock()
        with self.store.transaction() as s:
            if s.get(DatasetRow, name) is not None:
                raise Conflict(f"dataset {name} exists already: pick another name, or delete "
                               f"it first")
            s.add(DatasetRow(name=name, team=team, path=path, created_by=who.name,
                             created_at=now, pools=pools, node_labels=node_labels))
            s.flush()
            journal.audit(s, now, who.name, "dataset-create", name,
                          {"team": team, "path": path, "pools": pools,
                           **({"node_labels": node_labels} if node_labels else {})})
            for other in shared:
                self._grant(s, who, name, other, now)
        return self.find(name)

    def delete(self, who: Identity, name: str) -> None:
        found = self._managed(who, name)
        now = self.clock()
        with self.store.transaction() as s:
            s.execute(delete(DatasetShareRow).where(DatasetShareRow.dataset == found.name))
            s.execute(delete(DatasetRow).where(DatasetRow.name == found.name))
            journal.audit(s, now, who.name, "dataset-delete", found.name,
                          {"team": found.team, "path": found.path,
                           "shared_with": list(found.shared_with)})
        self.ledger.ended(DATASET, found.name, found.team, now)

    def share(self, who: Identity, name: str, team: str) -> Dataset:
        found = self._managed(who, name)
        other = self._teams([team], found.team, field="team")[0]
        if other not in found.shared_with:
            with self.store.transaction() as s:
                self._grant(s, who, found.name, other, self.clock())
        return self.find(found.name)

    def unshare(self, who: Identity, name: str, team: str) -> Dataset:
        found = self._managed(who, name)
        if team not in found.shared_with:
            raise NotFound(f"dataset {name} is not shared with team {team}")
        with self.store.transaction() as s:
            s.execute(delete(DatasetShareRow).where(DatasetShareRow.dataset == found.name,
                                                    DatasetShareRow.team == team))
            journal.audit(s, self.clock(), who.name, "dataset-revoke", found.name,
                          {"team": team})
        return self.find(found.name)

    @staticmethod
    def _grant(s, who: Identity, name: str, team: str, now: float) -> None:
        s.add(DatasetShareRow(dataset=name, team=team, granted_by=who.name, granted_at=now))
        journal.audit(s, now, who.name, "dataset-grant", name, {"team": team, "access": "read"})

    # ---- checks of a registration --------------------------------------------------
    def _owner(self, who: Identity, asked: Any) -> str:
        """The team a new dataset is for: one the caller leads (any, for an admin)."""
        if asked is not None and (not isinstance(asked, str) or not 0 < len(asked) <= 128):
            raise SpecError("team", "must be a team name")
        if asked is None:
            leads = sorted(who.leads)
            if len(leads) != 1:
                raise SpecError("team", "say which team the dataset is for" if leads or who.admin
                                else "only a team's lead or an admin may register a dataset",
                                status=400 if leads or who.admin else 403)
            asked = leads[0]
        if not rules.may_manage(who.admin, who.leads, asked):
            raise SpecError("team", f"only a lead of team {asked} or an admin may register its "
                                    f"datasets", status=403)
        if asked not in self.teams():
            raise SpecError("team", f"no team {asked}", status=404)
        return asked

    def _teams(self, value: Any, owner: str, field: str = "shared_with") -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise SpecError(field, "must be a list of team names")
        known = set(self.teams())
        for team in value:
            if team == owner:
                raise SpecError(field, f"team {owner} owns the dataset: it reads it already")
            if team not in known:
                raise SpecError(field, f"no team {team}", status=404)
        return sorted(set(value))

    def allowed_roots(self, who: Identity, team: str) -> list[str]:
        """Where ``who`` may register a dataset of ``team``: their workspace,
        the team's space, the admin's ``dataset_roots``."""
        roots = [self.workspace(who.name), self.team_dir(team) or "",
                 *self.roots]
        return [os.path.realpath(r) for r in roots if r]

    def _folder(self, who: Identity, team: str, value: Any) -> str:
        if not isinstance(value, str) or not value or "\x00" in value or len(value) > 4096:
            raise SpecError("path", "is required: the folder to register")
        roots = self.allowed_roots(who, team)
        path = os.path.realpath(os.path.join(roots[0], value))  # relative: in the workspace
        # A folder outside and one that is missing get the same answer: the
        # answer must not tell what exists where the caller cannot look.
        if rules.within(path, roots) is None or not os.path.isdir(path):
            raise SpecError("path", f"{value!r} is not a folder in your workspace, team "
                                    f"{team}'s space or a dataset root the admin allows")
        return path

    # ---- workloads -------------------------------------------------------------------
    def check(self, names: Iterable[str], team: str, pool: str) -> list[Dataset]:
        """At submit: each dataset exists (404), ``team`` may read it (403) and
        ``pool`` is one its residency allows (403), each naming the dataset."""
        out = []
        for name in names:
            found = self.find(name)
            if found is None:
                raise SpecError("datasets", f"no dataset {name}", status=404)
            if not rules.may_read(team, found.team, found.shared_with):
                raise SpecError("datasets", f"team {team} may not read dataset {name} (it is "
                                            f"team {found.team}'s and not shared with {team}: "
                                            f"ask a lead of {found.team})", status=403)
            refused = rules.residency_refusal(name, found.pools, pool)
            if refused:
                raise SpecError("pool", refused, status=403)
            out.append(found)
        return out

    def node_rules(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """At submit: the node labels each of these datasets' residency asks
        for (those with any), kept with the workload: the scheduler places it
        only on nodes that carry them (scheduler/model.py, combined_selector)."""
        out = {}
        for name in names:
            found = self.find(name)
            if found is not None and found.node_labels:
                out[name] = dict(found.node_labels)
        return out

    def mounts(self, row) -> tuple[tuple[str, str], ...]:
        """At a start of workload ``row``: (name, folder) of each dataset it
        asked for, checked again (a share revoked, a dataset deleted, or
        deleted and registered again with other node labels than the ones it
        was placed by, since the submit stops the start), and the use in the
        audit log: who read which data, when."""
        names = list(row.spec.get("datasets") or ())
        try:
            found = self.check(names, row.team, row.pool)
        except SpecError as e:
            raise Forbidden(f"dataset access changed since the submit: {e.message}") from e
        placed_by = row.spec.get("dataset_nodes") or {}
        for d in found:
            if d.node_labels and d.node_labels != placed_by.get(d.name):
                raise Forbidden(f"dataset access changed since the submit: dataset {d.name} "
                                f"may now only be read on nodes labelled "
                                f"{labels_text(d.node_labels)}; submit it again")
        now = self.clock()
        with self.store.transaction() as s:
            for d in found:
                journal.audit(s, now, row.user, "dataset-use", d.name,
                              {"workload": row.id, "attempt": row.attempt, "team": row.team,
                               "pool": row.pool, "path": d.path})
        return tuple((d.name, d.path) for d in found)

    def server_mounts(self, who: Identity, wid: str) -> tuple[tuple[str, str], ...]:
        """A notebook server's datasets as its spawner starts it (the hub's
        spawner, an admin): ``mounts`` of its running workload."""
        if not who.admin:
            raise Forbidden("only the hub's spawner (scope custom:gpuhub:admin) starts servers")
        with self.store.session() as s:
            row = s.get(WorkloadRow, wid)
            if row is None or row.kind != NOTEBOOK:
                raise NotFound(f"no notebook server workload {wid}")
            if row.state != "running":
                raise Conflict(f"workload {wid} is {row.state}: its datasets are mounted when "
                               f"it runs")
            row = SimpleNamespace(id=row.id, attempt=row.attempt, user=row.user, team=row.team,
                                  pool=row.pool, spec=dict(row.spec or {}))
        return self.mounts(row)

    # ---- sizes -----------------------------------------------------------------------
    @property
    def sizes(self) -> dict[str, Usage]:
        """Each dataset's last measurement, from the database."""
        return self.ledger.latest(DATASET)

    def measure_all(self) -> None:
        """Measure every dataset's folder and record it against its team
        (blocking: run it in a thread). One inside its team's space or inside
        another of its team's datasets is recorded but not charged: that one's
        measure counts it already."""
        with self.store.session() as s:
            rows = s.execute(select(DatasetRow.name, DatasetRow.team, DatasetRow.path)).all()
        charged: dict[str, list[str]] = {}  # team -> the folders charged to it so far
        for name, team, path in sorted(rows, key=lambda r: (r.team, len(r.path), r.name)):
            space = self.team_dir(team)
            counted = [os.path.realpath(space)] if space else []
            inside = rules.within(path, counted + charged.get(team, [])) is not None
            if not inside:
                charged.setdefault(team, []).append(path)
            self.ledger.record(DATASET, name, team, space_usage.measure(path, self.clock),
                               charged=not inside)

    async def run(self, interval: float) -> None:
        """Measure the datasets every ``interval`` seconds (0: never)."""
        while interval > 0:
            try:
                await asyncio.to_thread(self.measure_all)
            except Exception:
                log.exception("datasets: measuring failed")
            await asyncio.sleep(interval)
