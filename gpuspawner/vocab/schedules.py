"""Schedule requests as users send them (``POST`` and ``PATCH
/schedules``): parsing and validation. Pure: a JSON object in, the checked
fields or a ``SpecError`` naming the field out."""
from __future__ import annotations

from typing import Any

from gpuspawner.scheduler.workflow import cron
from gpuspawner.vocab.specs import NAME_RE, JobSpec, Limits, SpecError, parse_job, suffixed_notebook

CATCH_UP = ("once", "skip")
FIELDS = ("name", "team", "cron", "timezone", "spec", "paused", "catch_up")
EDITABLE = ("name", "cron", "timezone", "spec", "catch_up")
# A firing's workload is "<name>-YYYYmmddTHHMM", within a workload name's 128.
MAX_NAME = 100


def parse_schedule(body: Any, limits: Limits, partial: bool = False) -> dict[str, Any]:
    """The fields of a new schedule (``partial``: those of an edit), checked:
    ``cron`` and ``timezone`` as given, ``spec`` as a JobSpec body."""
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object")
    known = EDITABLE if partial else FIELDS
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise SpecError(unknown[0], f"is not a known field{' to edit' if partial else ''}; "
                                    f"known fields: {', '.join(known)}")
    if partial and not body:
        raise SpecError("body", f"names nothing to change; fields: {', '.join(EDITABLE)}")
    out: dict[str, Any] = {}
    if "name" in body or not partial:
        out["name"] = _name(body.get("name"))
    if "cron" in body or not partial:
        out["cron"] = parse_cron(body.get("cron")).text
    if "timezone" in body or not partial:
        tz = body.get("timezone", "UTC")
        _zone(tz)
        out["timezone"] = tz
    if "catch_up" in body or not partial:
        catch_up = body.get("catch_up", "once")
        if catch_up not in CATCH_UP:
            raise SpecError("catch_up", f"must be one of {', '.join(CATCH_UP)}, got {catch_up!r}")
        out["catch_up"] = catch_up
    if "spec" in body or not partial:
        out["spec"] = dict(body.get("spec") or {}) if isinstance(body.get("spec"), dict) else None
        if out["spec"] is None:
            raise SpecError("spec", "is required: the job to submit at each firing (as POST "
                                    "/workloads takes it)")
        job_spec(out["spec"], limits)  # a name it gives must be a valid one ...
        out["spec"].pop("name", None)  # ... but each firing's workload has its own
    if not partial:
        team = body.get("team")
        if team is not None and (not isinstance(team, str) or not NAME_RE.fullmatch(team)):
            raise SpecError("team", f"must be a team name, got {team!r}")
        out["team"] = team
        paused = body.get("paused", False)
        if not isinstance(paused, bool):
            raise SpecError("paused", f"must be true or false, got {paused!r}")
        out["paused"] = paused
    return out


def parse_cron(text: Any) -> cron.Cron:
    if text is None:
        raise SpecError("cron", "is required: 'minute hour day-of-month month day-of-week' "
                                "(e.g. '*/5 * * * *') or @hourly, @daily, @weekly, @monthly")
    if not isinstance(text, str) or len(text) > 255:
        raise SpecError("cron", "must be a string of at most 255 characters")
    try:
        return cron.parse(text)
    except cron.CronError as e:
        raise SpecError("cron", str(e)) from None


def _zone(name: Any):
    if not isinstance(name, str) or len(name) > 64:
        raise SpecError("timezone", f"must be an IANA time zone name, got {name!r}")
    try:
        return cron.zone(name)
    except cron.CronError as e:
        raise SpecError("timezone", str(e).partition(": ")[2]) from None


def _name(name: Any) -> str:
    if name is None:
        raise SpecError("name", "is required")
    if not isinstance(name, str) or len(name) > MAX_NAME or not NAME_RE.fullmatch(name):
        raise SpecError("name", f"may use letters, digits, '.', '_' and '-' (at most {MAX_NAME})")
    return name


def firing_output(body: dict, stamp: str) -> dict:
    """The spec of one firing: a notebook's executed copy gets ``-<stamp>``
    before its extension (``out/report.ipynb`` → ``out/report-20261201T0600.ipynb``),
    so each run keeps its own instead of writing over the last one's."""
    out = body.get("output_notebook")
    if not isinstance(out, str) or not out:
        return body
    return {**body, "output_notebook": suffixed_notebook(out, stamp)}


def job_spec(body: dict, limits: Limits, name: str = "", team: str | None = None) -> JobSpec:
    """The JobSpec a firing submits (field errors named ``spec.<field>``)."""
    if name:
        body = {**body, "name": name}
    if team is not None:
        body = {**body, "team": team}
    try:
        return parse_job(body, limits)
    except SpecError as e:
        raise SpecError(f"spec.{e.field}", e.message, e.status) from None
