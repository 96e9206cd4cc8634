"""Deployments in the database: deploy a revision, split traffic, promote,
roll back, scale, delete. Every change is audited. What runs (replicas) is
the controller's business (``serving_controller``)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from typing import Any, Optional

from sqlalchemy import delete, select

from gpuspawner.serving.replica import RUNTIMES
from gpuspawner.store import DeploymentRow, RevisionRow
from gpuspawner.service.loop import journal
from gpuspawner.service.loop.facades import Facades
from gpuspawner.service.errors import Conflict, Forbidden, NotFound
from gpuspawner.service.loop.launch import in_workspace
from gpuspawner.vocab.shares import parse_share, resolve_share
from gpuspawner.service.access.identity import Identity
from gpuspawner.vocab.specs import SpecError, parse_after
from gpuspawner.service.workloads.waiting import check_after, target_states
from gpuspawner.scheduler.workflow.dependencies import MET, NEVER, resolve

# A revision's states: deployed (it may take traffic), waiting for its
# ``after``, or never deployed (its dependency failed, or its model was then
# invalid; or it was cancelled while it waited).
READY, WAITING, FAILED, CANCELLED = "ready", "waiting", "failed", "cancelled"

NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# file.py:Class, the file relative to the model directory (checked to stay in it).
PREDICTOR = re.compile(r"[^:/][^:]*\.py:[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class DeploySpec:
    name: str
    team: str
    model_dir: str
    runtime: str
    predictor: str
    pool: str
    gpus: int
    min_replicas: int
    max_replicas: int
    target_in_flight: float
    scale_to_zero_after: Optional[float]
    canary_percent: Optional[int]
    rollback: dict
    max_batch_size: int
    max_batch_time: float
    after: tuple = ()
    # Part of one GPU per replica (share_specs.ShareRequest), resolved against
    # the pool's slots when deployed into ``gpu_share``.
    share: Any = None
    gpu_share: float = 0.0

    def settings(self) -> dict:
        """What a rollout sets on the deployment (kept on a waiting revision)."""
        return {"pool": self.pool, "gpus": self.gpus, "gpu_share": self.gpu_share,
                "min_replicas": self.min_replicas,
                "max_replicas": self.max_replicas, "target_in_flight": self.target_in_flight,
                "scale_to_zero_after": self.scale_to_zero_after, "rollback": self.rollback,
                "canary_percent": self.canary_percent}


def _int(body: dict, key: str, default: int, lo: int, hi: int) -> int:
    v = body.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SpecError(key, f"must be a whole number from {lo} to {hi}, got {v!r}")
    return v


def _num(body: dict, key: str, default, lo: float, hi: float, optional: bool = False):
    v = body.get(key, default)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise SpecError(key, f"must be a number from {lo:g} to {hi:g}, got {v!r}")
    return float(v)


FIELDS = {"name", "team", "model_dir", "runtime", "predictor", "pool", "gpus", "min_replicas",
          "max_replicas", "target_in_flight", "scale_to_zero_after", "canary_percent",
          "rollback", "max_batch_size", "max_batch_time", "after", "gpu_share", "gpu_memory"}


def parse_deploy(body: Any, default_pool: str) -> DeploySpec:
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object with at least name and model_dir")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise SpecError(unknown[0], f"is not a known field; known: {', '.join(sorted(FIELDS))}")
    name = body.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SpecError("name", "is required: lowercase letters, digits and '-', at most 63, "
                                f"starting and ending with a letter or digit (got {name!r})")
    model_dir = body.get("model_dir")
    if not isinstance(model_dir, str) or not model_dir:
        raise SpecError("model_dir", "is required: the directory with the model")
    runtime = body.get("runtime", "sklearn")
    if not isinstance(runtime, str) or runtime not in RUNTIMES:
        raise SpecError("runtime", f"unknown runtime {runtime!r}; known: "
                                   f"{', '.join(sorted(RUNTIMES))}")
    predictor = body.get("predictor", "predictor.py:Model" if runtime == "predictor" else "")
    if runtime == "predictor" and not (isinstance(predictor, str) and len(predictor) <= 255
                                       and PREDICTOR.fullmatch(predictor)):
        raise SpecError("predictor", "must look like 'predictor.py:Model': a .py file in "
                                     "model_dir and a class name, at most 255 characters")
    min_r = _int(body, "min_replicas", 1, 0, 64)
    max_r = _int(body, "max_replicas", max(min_r, 1), 1, 64)
    if max_r < min_r:
        raise SpecError("max_replicas", f"must be at least min_replicas ({min_r})")
    share = parse_share(body)
    gpus = _int(body, "gpus", 1 if share else 0, 0, 16)
    scale_to_zero = _num(body, "scale_to_zero_after", None, 10, 86400 * 7, optional=True)
    if scale_to_zero is not None and (gpus or min_r):
        raise SpecError("scale_to_zero_after", "needs gpus 0 and min_replicas 0 (a GPU "
                                               "replica keeps its GPUs warm)")
    canary, rb = _canary(body), _rollback(body)
    team = body.get("team", "")
    if not isinstance(team, str) or len(team) > 128:
        raise SpecError("team", "must be a team name (at most 128 characters)")
    pool = body.get("pool") or default_pool
    if not isinstance(pool, str):
        raise SpecError("pool", "must be a string")
    return DeploySpec(name=name, team=team, model_dir=model_dir, runtime=runtime,
                      predictor=predictor or "", pool=pool, gpus=gpus, share=share,
                      min_replicas=min_r,
                      max_replicas=max_r,
                      target_in_flight=_num(body, "target_in_flight", 4, 0.1, 10000),
                      scale_to_zero_after=scale_to_zero, canary_percent=canary, rollback=rb,
                      max_batch_size=_int(body, "max_batch_size", 16, 1, 4096),
                      max_batch_time=_num(body, "max_batch_time", 0.005, 0, 10),
                      after=tuple(parse_after(body.get("after"))))


def _canary(body: dict) -> Optional[int]:
    canary = body.get("canary_percent")
    if canary is not None and (isinstance(canary, bool) or not isinstance(canary, int)
                               or not 1 <= canary <= 99):
        # 100 would leave the stable revision nothing: that is a full rollout
        # (deploy without canary_percent), not a canary.
        raise SpecError("canary_percent", f"must be a whole percent from 1 to 99, got {canary!r} "
                                          f"(all of the traffic: deploy without canary_percent)")
    return canary


def _rollback(body: dict) -> dict:
    """When a canary is rolled back by itself: its error rate, p99 and how many requests tell."""
    rollback = body.get("rollback") or {}
    if not isinstance(rollback, dict) or set(rollback) - {"error_rate", "p99_ms", "min_requests"}:
        raise SpecError("rollback", "must be an object with error_rate, p99_ms and/or min_requests")
    rb = {}
    if "error_rate" in rollback:
        rb["error_rate"] = _num(rollback, "error_rate", None, 0, 1)
    if "p99_ms" in rollback:
        rb["p99_ms"] = _num(rollback, "p99_ms", None, 1, 600000)
    if "min_requests" in rollback:
        rb["min_requests"] = _int(rollback, "min_requests", 20, 1, 100000)
    return rb


class Deployments:
    def __init__(self, facades: Facades):
        self.records, self.cluster = facades.records, facades.cluster
        self.submissions = facades.submissions
        # A revision's model directory must be in its author's workspace.
        self.workspace = facades.paths.workspace

    # ---- reading -----------------------------------------------------------------------------
    def find(self, s, who: Identity, team: str, name: str) -> DeploymentRow:
        row = s.scalars(select(DeploymentRow).where(DeploymentRow.team == team,
                                                    DeploymentRow.name == name)).first()
        if row is None or not who.sees_team(team):
            raise NotFound(f"no deployment {team}/{name}")
        return row

    def revisions(self, s, dep: DeploymentRow) -> list[RevisionRow]:
        return list(s.scalars(select(RevisionRow).where(RevisionRow.deployment_id == dep.id)
                              .order_by(RevisionRow.number)))

    def _may_change(self, who: Identity, dep: DeploymentRow) -> None:
        if not who.acts_on(dep.user, dep.team):
            raise Forbidden(f"deployment {dep.team}/{dep.name} belongs to {dep.user}; only they, "
                            f"a lead of team {dep.team} or an admin may change it")

    # ---- changes -----------------------------------------------------------------------------
    def deploy(self, who: Identity, spec: DeploySpec) -> tuple[DeploymentRow, int]:
        """A new deployment (revision 1, all traffic), or a new revision of an
        existing one: all traffic, or ``canary_percent`` of it. With
        ``after``, the revision waits (no replicas, no GPUs, the deployment
        as it was) until its dependencies are met; ``release_waiting`` then
        checks its model directory and rolls it out. The revision is
        ``who``'s: its model directory must be in their workspace and its
        replicas run as their account (a lead's fix to a member's
        deployment runs as the lead, never as the member)."""
        if not who.can_submit:
            raise Forbidden("you may not deploy (scope custom:gpuhub:submit)")
        team = self.submissions.team_for(who, spec.team or None)
        if spec.pool not in self.cluster.state.capacity:
            raise SpecError("pool", f"unknown pool {spec.pool!r}; known pools: "
                                    f"{', '.join(sorted(self.cluster.state.capacity))}")
        if spec.share is not None:
            spec = replace(spec, gpu_share=resolve_share(spec.share, spec.pool,
                                                         self.cluster.pool_sharing(spec.pool)))
        if spec.after:  # the model may only exist once the job ran: checked at release
            home = self.workspace(who.name)
            model_dir = in_workspace(home, os.path.join(home, spec.model_dir), "model_dir")
        else:
            model_dir = self._model_dir(who.name, spec.model_dir, spec.predictor)
        now = self.records.clock()
        with self.records.store.transaction() as s:
            after = list(spec.after)
            if after:
                check_after(s, who, f"{team}/{spec.name}", after)
            dep, number = self._next_revision(s, who, team, spec, now)
            rev = RevisionRow(deployment_id=dep.id, number=number, model_dir=model_dir,
                              runtime=spec.runtime, predictor=spec.predictor,
                              max_batch_size=spec.max_batch_size,
                              max_batch_time=spec.max_batch_time, created_at=now,
                              created_by=who.name, state=READY, reason="", after=after)
            s.add(rev)
            if after:
                _verdict, why = resolve(after, target_states(s, [d["id"] for d in after]))
                rev.state, rev.reason, rev.pending = WAITING, why or "waiting", spec.settings()
                dep.message = f"revision {number} is {rev.reason}"
            else:
                self._roll_out(dep, number, spec.settings(), now)
            # Its author is whose account its code runs as (not the owner's).
            journal.audit(s, now, who.name, "deploy", f"{team}/{spec.name}",
                          {"revision": number, "created_by": who.name, "owner": dep.user,
                           "model_dir": model_dir, "runtime": spec.runtime,
                           "traffic": dict(dep.traffic), "gpus": spec.gpus,
                           **({"gpu_share": spec.gpu_share} if spec.gpu_share else {}),
                           "after": after})
        self.submissions.wake()
        return dep, number

    def _next_revision(self, s, who: Identity, team: str, spec: DeploySpec,
                       now: float) -> tuple[DeploymentRow, int]:
        """The deployment (made with ``spec``'s settings if new) and the number
        of the revision ``who`` adds to it."""
        dep = s.scalars(select(DeploymentRow).where(DeploymentRow.team == team,
                                                    DeploymentRow.name == spec.name)).first()
        if dep is None:
            dep = DeploymentRow(team=team, name=spec.name, user=who.name, created_at=now,
                                traffic={}, stable_revision=1, updated_at=now)
            self._apply(dep, spec.settings())
            s.add(dep)
            s.flush()
            return dep, 1
        self._may_change(who, dep)
        s.flush()
        return dep, max(r.number for r in self.revisions(s, dep)) + 1

    @staticmethod
    def _apply(dep: DeploymentRow, settings: dict) -> None:
        for key in ("pool", "gpus", "min_replicas", "max_replicas", "target_in_flight",
                    "scale_to_zero_after", "rollback"):
            setattr(dep, key, settings[key])
        dep.gpu_share = settings.get("gpu_share", 0.0)  # kept before shares: none

    def _roll_out(self, dep: DeploymentRow, number: int, settings: dict, now: float) -> None:
        """Revision ``number`` takes all the traffic, or its canary share."""
        self._apply(dep, settings)
        dep.updated_at = now
        canary = settings.get("canary_percent")
        if not dep.traffic or canary in (None, 100):
            dep.traffic, dep.stable_revision = {str(number): 100}, number
            dep.message = f"revision {number} takes all traffic"
        else:
            dep.traffic = {str(dep.stable_revision): 100 - canary, str(number): canary}
            dep.message = f"revision {number} is a {canary}% canary"

    def release_waiting(self) -> int:
        """Roll out the waiting revisions whose dependencies are met (their
        model directory checked now), end those whose dependency failed or
        whose model is invalid. From the database: a restart loses nothing.
        How many revisions it ended waiting."""
        now = self.records.clock()
        done = 0
        with self.records.store.transaction() as s:
            revs = list(s.scalars(select(RevisionRow).where(RevisionRow.state == WAITING)
                                  .order_by(RevisionRow.deployment_id, RevisionRow.number)))
            if not revs:
                return 0
            states = target_states(s, {d["id"] for r in revs for d in r.after or ()})
            for rev in revs:
                verdict, why = resolve(rev.after or (), states)
                if verdict not in (MET, NEVER):
                    rev.reason = why
                    continue
                dep = s.get(DeploymentRow, rev.deployment_id)
                if verdict == MET:  # in the workspace of its author, whose code it is
                    try:
                        self._model_dir(rev.created_by, rev.model_dir, rev.predictor)
                    except SpecError as e:
                        verdict, why = NEVER, str(e)
                done += 1
                where = f"{dep.team}/{dep.name}"
                if verdict == NEVER:
                    rev.state, rev.reason, rev.pending = FAILED, why, None
                    dep.message = f"revision {rev.number} not deployed: {why}"
                    journal.audit(s, now, "gpuhub", "deploy-failed", where,
                                  {"revision": rev.number, "created_by": rev.created_by,
                                   "why": why})
                    continue
                self._roll_out(dep, rev.number, rev.pending or {}, now)
                rev.state, rev.reason, rev.pending = READY, "", None
                journal.audit(s, now, "gpuhub", "deploy-released", where,
                              {"revision": rev.number, "created_by": rev.created_by,
                               "traffic": dict(dep.traffic)})
        if done:
            self.submissions.wake()
        return done

    def any_waiting(self) -> bool:
        """Whether some revision waits for its dependencies (a read: no write turn)."""
        with self.records.store.session() as s:
            return s.scalar(select(RevisionRow.number).where(RevisionRow.state == WAITING)
                            .limit(1)) is not None

    def cancel_revision(self, who: Identity, team: str, name: str, number: int) -> DeploymentRow:
        """A waiting revision never rolls out: its owner, a lead of its team
        or an admin cancels it; the deployment serves on as it did (its
        traffic, replicas and settings are untouched). Only a waiting
        revision: a deployed one is rolled back, not cancelled."""
        now = self.records.clock()
        with self.records.store.transaction() as s:
            dep = self.find(s, who, team, name)
            self._may_change(who, dep)
            rev = next((r for r in self.revisions(s, dep) if r.number == number), None)
            if rev is None:
                raise NotFound(f"deployment {team}/{name} has no revision {number}")
            if rev.state != WAITING:
                hint = " (roll it back instead)" if rev.state == READY else ""
                raise Conflict(f"revision {number} of {team}/{name} is {rev.state}, not waiting: "
                               f"only a waiting revision can be cancelled{hint}")
            waited_for = rev.reason
            rev.state, rev.reason, rev.pending = CANCELLED, f"cancelled by {who.name}", None
            serving = ", ".join(f"revision {r} ({w}%)" for r, w in sorted(dep.traffic.items()))
            dep.message = (f"revision {number} cancelled by {who.name}; "
                           + (f"serving {serving} as before" if serving else "nothing deployed"))
            dep.updated_at = now
            journal.audit(s, now, who.name, "cancel-revision", f"{team}/{name}",
                          {"revision": number, "created_by": rev.created_by,
                           "was": waited_for, "traffic": dict(dep.traffic)})
        self.submissions.wake()
        return dep

    def _model_dir(self, user: str, path: str, predictor: str = "") -> str:
        """The model directory's full path, once it is a readable directory of
        the user's workspace (with the predictor's file in it)."""
        home = self.workspace(user)
        full = in_workspace(home, os.path.join(home, path), "model_dir")
        if not os.path.isdir(full):
            raise SpecError("model_dir", f"{path!r} is not a directory (relative paths start "
                                         f"at {home})")
        if not os.access(full, os.R_OK | os.X_OK):
            raise SpecError("model_dir", f"{full} is not readable")
        if predictor:
            in_workspace(full, os.path.join(full, predictor.rsplit(":", 1)[0]), "predictor")
        return full

    def set_traffic(self, who: Identity, team: str, name: str, traffic: dict, action: str,
                    message: str) -> DeploymentRow:
        now = self.records.clock()
        with self.records.store.transaction() as s:
            dep = self.find(s, who, team, name)
            self._may_change(who, dep)
            authors = {r.number: r.created_by for r in self.revisions(s, dep)
                       if r.state == READY}
            numbers = set(authors)
            for rev, weight in traffic.items():
                if not (isinstance(rev, str) and rev.isdigit() and rev.isascii()):
                    raise SpecError("traffic", f"keys are revision numbers such as \"1\", "
                                               f"got {rev!r}")
                if int(rev) not in numbers:
                    raise SpecError("traffic", f"deployment {team}/{name} has no deployed "
                                               f"revision {rev}; it has "
                                               f"{', '.join(map(str, sorted(numbers)))}")
                if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
                    raise SpecError("traffic", f"weights are whole percents, got {weight!r}")
            if sum(traffic.values()) != 100:
                raise SpecError("traffic", f"weights must add up to 100, got "
                                           f"{sum(traffic.values())}")
            before = dict(dep.traffic)
            if len({int(k) for k in traffic}) < len(traffic):
                raise SpecError("traffic", "names a revision twice")
            dep.traffic = {str(int(k)): v for k, v in traffic.items() if v > 0}
            if len(dep.traffic) == 1:
                dep.stable_revision = int(next(iter(dep.traffic)))
            dep.message, dep.updated_at = message, now
            # Whose code now takes the traffic: each revision runs as its author.
            journal.audit(s, now, who.name, action, f"{team}/{name}",
                          {"before": before, "after": dict(dep.traffic), "why": message,
                           "runs_as": {r: authors[int(r)] for r in dep.traffic}})
        self.submissions.wake()
        return dep

    def canary(self, dep: DeploymentRow) -> Optional[int]:
        others = [int(r) for r in dep.traffic if int(r) != dep.stable_revision]
        return max(others) if others else None

    def promote(self, who: Identity, team: str, name: str) -> DeploymentRow:
        with self.records.store.session() as s:
            dep = self.find(s, who, team, name)
        rev = self.canary(dep)
        if rev is None:
            raise Conflict(f"deployment {team}/{name} has no canary to promote")
        return self.set_traffic(who, team, name, {str(rev): 100}, "promote",
                                f"revision {rev} promoted to all traffic")

    def rollback(self, who: Identity, team: str, name: str, why: str = "") -> DeploymentRow:
        """Back to the stable revision; without a canary, back to the
        revision before the stable one."""
        with self.records.store.session() as s:
            dep = self.find(s, who, team, name)
            numbers = [r.number for r in self.revisions(s, dep) if r.state == READY]
        if self.canary(dep) is not None:
            target = dep.stable_revision
        else:
            older = [n for n in numbers if n < dep.stable_revision]
            if not older:
                raise Conflict(f"deployment {team}/{name} has no earlier revision to roll back to")
            target = max(older)
        return self.set_traffic(who, team, name, {str(target): 100}, "rollback",
                                why or f"rolled back to revision {target}")

    def scale(self, who: Identity, team: str, name: str, body: Any) -> DeploymentRow:
        """New replica bounds, and for a CPU deployment the idle time after
        which it scales to zero (``min_replicas`` 0)."""
        fields = {"min_replicas", "max_replicas", "scale_to_zero_after"}
        if not isinstance(body, dict) or set(body) - fields or not body:
            raise SpecError("body", "must be an object with min_replicas, max_replicas and/or "
                                    "scale_to_zero_after")
        now = self.records.clock()
        with self.records.store.transaction() as s:
            dep = self.find(s, who, team, name)
            self._may_change(who, dep)
            lo = _int(body, "min_replicas", dep.min_replicas, 0, 64)
            hi = _int(body, "max_replicas", max(dep.max_replicas, lo), 1, 64)
            if hi < lo:
                raise SpecError("max_replicas", f"must be at least min_replicas ({lo})")
            idle = _num(body, "scale_to_zero_after", dep.scale_to_zero_after, 10, 86400 * 7,
                        optional=True)
            if lo == 0 and dep.gpus:
                raise SpecError("min_replicas", "0 is for deployments without GPUs (a GPU "
                                                "replica keeps its GPUs warm)")
            if lo == 0 and idle is None:
                raise SpecError("scale_to_zero_after", "is needed for min_replicas 0: the "
                                                       "seconds without a request before it goes")
            before = [dep.min_replicas, dep.max_replicas, dep.scale_to_zero_after]
            dep.min_replicas, dep.max_replicas, dep.updated_at = lo, hi, now
            dep.scale_to_zero_after = idle
            journal.audit(s, now, who.name, "scale", f"{team}/{name}",
                               {"before": before, "after": [lo, hi, idle]})
        self.submissions.wake()
        return dep

    def delete(self, who: Identity, team: str, name: str) -> None:
        now = self.records.clock()
        with self.records.store.transaction() as s:
            dep = self.find(s, who, team, name)
            self._may_change(who, dep)
            journal.audit(s, now, who.name, "delete-deployment", f"{team}/{name}",
                               {"revisions": [r.number for r in self.revisions(s, dep)]})
            s.execute(delete(RevisionRow).where(RevisionRow.deployment_id == dep.id))
            s.delete(dep)
        self.submissions.wake()
