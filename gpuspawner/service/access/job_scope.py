"""What a job's own token (``GPUHUB_TOKEN``, job_tokens.py) may do here.

The hub knows it only as a token of the job's user with
``custom:gpuhub:submit``: it could do everything its user can. The service
tells it from the user's other tokens by the note it was made with
(``gpuhub job ID attempt N``, asked of the hub once per token) and holds it
to ``ALLOWED``: deny by default, each allowed route with its rule.

- ``ANY``: the route reaches nothing of anyone else (who am I);
- ``OWN``: only the token's own workload, what it waits for (its ``after``:
  a pipeline's evaluation reads the sweep it waited for) and the
  follow-ups it submitted;
- ``FOLLOW_UP``: submit a job in the job's own team, at most
  ``GpuHubService.job_token_max_follow_ups`` per attempt and
  ``job_token_max_pipeline`` per pipeline (follow-ups of follow-ups count
  against the first job), counted in the database: a follow-up's ``spec``
  records who submitted it (``submitted_by``).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from sqlalchemy import select

from gpuspawner.store import WorkloadRow
from gpuspawner.service.errors import Forbidden, NotFound
from gpuspawner.service.access.identity import JobRef
from gpuspawner.service.loop.facades import Records, Submissions

NOTE = re.compile(r"gpuhub job ([A-Za-z0-9_-]{1,32}) attempt ([0-9]{1,9})")

ANY, OWN, FOLLOW_UP = "any", "own", "follow-up"

# (method, route as api/routes.py names it) -> rule. Everything else: 403.
ALLOWED = {
    ("GET", "/me"): ANY,
    ("POST", "/workloads"): FOLLOW_UP,
    ("GET", "/workloads/{id}"): OWN,
    ("GET", "/workloads/{id}/events"): OWN,
    ("GET", "/workloads/{id}/logs"): OWN,
    ("GET", "/sweeps/{id}"): OWN,
}


def job_of_note(note: Optional[str]) -> Optional[JobRef]:
    m = NOTE.fullmatch(note or "")
    return JobRef(m.group(1), int(m.group(2))) if m else None


def refusal(method: str, route: Optional[str]) -> str:
    what = f"{method} {route}" if route else "use this page"
    allowed = ", ".join(f"{m} {r}" for m, r in ALLOWED)
    return (f"a job's token may not {what}: it may only submit follow-up jobs in its team "
            f"and read its own workload ({allowed})")


def check(store, job: JobRef, user: str, method: str, route: Optional[str],
          path_args: tuple) -> None:
    """Forbidden unless ``ALLOWED`` lets a job's token do this. ``route`` is the
    API route as ``api/routes.py`` names it (None for a page or the router)."""
    rule = ALLOWED.get((method, route))
    if rule is None:
        raise Forbidden(refusal(method, route))
    if rule == OWN and not _reads(store, user, job, path_args[0]):
        raise Forbidden(f"a job's token may not read {path_args[0]}: it reads only its own "
                        f"workload ({job.workload}), what it waits for (after) and the "
                        f"follow-ups it submitted")


def _reads(store, user: str, job: JobRef, target: str) -> bool:
    if target == job.workload:
        return True
    with store.session() as s:
        own = s.get(WorkloadRow, job.workload)
        if own is None or own.user != user:
            return False
        if target in {d["id"] for d in own.after or ()}:
            return True
        row = s.get(WorkloadRow, target)
    return (row is not None and row.user == user
            and ((row.spec or {}).get("submitted_by") or {}).get("workload") == job.workload)


def submit_follow_up(records: Records, submissions: Submissions, who, spec,
                     max_per_attempt: int, max_per_pipeline: int):
    """Queue ``spec`` for the job behind ``who``'s token, in the job's team,
    recording in its spec which attempt (and pipeline) submitted it."""
    job = who.job
    with records.store.session() as s:
        parent = s.get(WorkloadRow, job.workload)
    if parent is None or parent.user != who.name:
        raise NotFound(f"no workload {job.workload} of {who.name}: this job's token is stale")
    if spec.team not in (None, parent.team):
        raise Forbidden(f"a job's token may not submit to team {spec.team}: its follow-ups "
                        f"run in its own team ({parent.team})")
    root = ((parent.spec or {}).get("submitted_by") or {}).get("pipeline") or parent.id
    by_attempt, in_pipeline = _follow_ups(records.store, who.name, parent.team, job, root)
    if by_attempt >= max_per_attempt:
        raise Forbidden(f"a job's token may not submit more than {max_per_attempt} follow-ups "
                        f"per attempt (GpuHubService.job_token_max_follow_ups); attempt "
                        f"{job.attempt} of {job.workload} submitted {by_attempt}")
    if in_pipeline >= max_per_pipeline:
        raise Forbidden(f"a job's token may not submit more than {max_per_pipeline} follow-ups "
                        f"in one pipeline (GpuHubService.job_token_max_pipeline); pipeline "
                        f"{root} has {in_pipeline}")
    row = submissions.new_row(who, replace(spec, team=parent.team))
    row.spec = {**row.spec, "submitted_by": {"workload": job.workload, "attempt": job.attempt,
                                             "pipeline": root}}
    return submissions.queue_row(row, who.name)


def _follow_ups(store, user: str, team: str, job: JobRef, root: str) -> tuple[int, int]:
    """How many follow-ups this attempt, and the whole pipeline, submitted:
    the user's workloads in the team since the pipeline's first job, by the
    ``submitted_by`` their specs record (portable across databases, where
    a JSON query is not)."""
    with store.session() as s:
        since = s.scalar(select(WorkloadRow.submitted_at).where(WorkloadRow.id == root))
        specs = s.scalars(select(WorkloadRow.spec).where(
            WorkloadRow.user == user, WorkloadRow.team == team,
            WorkloadRow.submitted_at >= (since or 0))).all()
    by = [(spec or {}).get("submitted_by") or {} for spec in specs]
    return (sum(1 for b in by if b.get("workload") == job.workload
                and b.get("attempt") == job.attempt),
            sum(1 for b in by if b.get("pipeline") == root))
