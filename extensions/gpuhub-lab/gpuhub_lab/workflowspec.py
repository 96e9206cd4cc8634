"""The Sweep and Schedule tabs' JSON → the service's sweep and schedule
bodies, and the service's sweeps → what the front end shows. The job part
of either form is the submit form's, made into a job spec by
``jobspec.build_spec``: a sweep's template and a schedule's spec are the
same spec a single job of that form would get.

Pure functions of the form, the server's root directory and the service
root, as jobspec's are.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from . import jobspec
from .jobspec import FormError

SWEEP_FIELDS = {"grid", "max_running", "metric", "after"}
SCHEDULE_FIELDS = {"schedule_name", "cron", "timezone", "paused", "catch_up"}
GOALS = ("max", "min")
CATCH_UP = ("once", "skip")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _job_part(form: Any, own: set[str]) -> tuple[dict, dict]:
    """The form split into the job's fields and this tab's own."""
    if not isinstance(form, dict):
        raise FormError("body", "must be a JSON object")
    return ({k: v for k, v in form.items() if k not in own},
            {k: v for k, v in form.items() if k in own})


def _grid(value: Any) -> dict[str, list]:
    if not isinstance(value, dict) or not value:
        raise FormError("grid", "give at least one parameter with a list of values")
    for name, values in value.items():
        if not _IDENT.match(name):
            raise FormError("grid", f"{name!r} is not a parameter name")
        if not isinstance(values, list) or not values:
            raise FormError("grid", f"{name}: give a list of at least one value")
    return value


def _metric(value: Any) -> Optional[dict]:
    """``{name, goal}``; none named: the results table shows parameters only."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name", ""), str):
        raise FormError("metric", "must be {name, goal}")
    name = value.get("name", "").strip()
    if not name:
        return None
    goal = value.get("goal", "max")
    if goal not in GOALS:
        raise FormError("metric", f"goal must be max or min, not {goal!r}")
    return {"name": name, "goal": goal}


def build_sweep(form: Any, root_dir: str, service_root: str,
                now: Optional[float] = None) -> tuple[dict, list[str]]:
    """The service's sweep body (POST /sweeps) for the Sweep tab, and the
    directories to create first. The grid's parameters reach a notebook as
    papermill parameters (the service merges each task's into the
    template's); a script gets them as ``--name={name}`` arguments, which
    the service fills in per task."""
    job, own = _job_part(form, SWEEP_FIELDS)
    grid = _grid(own.get("grid"))
    fixed = job.get("parameters") or {}
    if not isinstance(fixed, dict):
        raise FormError("parameters", "must be an object of name: value")
    is_notebook = str(job.get("path", "")).lower().endswith(jobspec.NOTEBOOK)
    swept = {} if is_notebook else {name: "{%s}" % name for name in grid}
    job["parameters"] = {**{k: v for k, v in fixed.items() if k not in grid}, **swept}
    template, make_dirs = jobspec.build_spec(job, root_dir, service_root, now)
    body: dict[str, Any] = {"name": template["name"], "template": template, "grid": grid}
    if template.get("team"):
        body["team"] = template["team"]
    max_running = own.get("max_running")
    if max_running not in (None, ""):
        if isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1:
            raise FormError("max_running", "must be a whole number of at least 1 (or empty: "
                                           "no cap)")
        body["max_running"] = max_running
    metric = _metric(own.get("metric"))
    if metric:
        body["metric"] = metric
    after = jobspec.dependencies(own.get("after"))
    if after:
        body["after"] = after
    return body, make_dirs


def build_schedule(form: Any, root_dir: str, service_root: str,
                   now: Optional[float] = None) -> tuple[dict, list[str]]:
    """The service's schedule body (POST /schedules) for the Schedule tab.
    Whether the cron expression and the time zone are good is the service's
    to say (its refusal names the field)."""
    job, own = _job_part(form, SCHEDULE_FIELDS)
    cron = own.get("cron")
    if not isinstance(cron, str) or not cron.strip():
        raise FormError("cron", "is required (e.g. 0 9 * * 1-5)")
    spec, make_dirs = jobspec.build_spec(job, root_dir, service_root, now)
    body: dict[str, Any] = {
        "name": (own.get("schedule_name") or "").strip() or spec["name"],
        "cron": cron.strip(), "spec": spec,
        "paused": bool(own.get("paused", False)),
    }
    if spec.get("team"):
        body["team"] = spec["team"]
    timezone = own.get("timezone")
    if timezone:
        if not isinstance(timezone, str):
            raise FormError("timezone", "must be an IANA time zone name such as Europe/Paris")
        body["timezone"] = timezone.strip()
    catch_up = own.get("catch_up")
    if catch_up:
        if catch_up not in CATCH_UP:
            raise FormError("catch_up", "must be once or skip")
        body["catch_up"] = catch_up
    return body, make_dirs


def describe_sweep(sweep: dict, service_root: str) -> dict:
    """The sweep with each task's output notebook (and the best task's)
    relative to this server's root, or None when outside it."""
    out = dict(sweep)
    if "tasks" in sweep:
        out["tasks"] = [{**t, "output_path": jobspec.inside_root(t.get("output_notebook"),
                                                                 service_root)}
                        for t in sweep["tasks"]]
    return out


def describe_schedule(schedule: dict, service_root: str) -> dict:
    """The schedule with the file its spec runs relative to this server's root."""
    spec = schedule.get("spec") or {}
    out = dict(schedule)
    out["source_path"] = jobspec.describe(spec, service_root)["source_path"] if spec else None
    return out


def schedule_patch(form: Any) -> dict:
    """What the Jobs panel may change of a schedule (the service checks values)."""
    if not isinstance(form, dict) or not form:
        raise FormError("body", "must be an object with name, cron, timezone or catch_up")
    allowed = {"name", "cron", "timezone", "catch_up"}
    unknown = sorted(set(form) - allowed)
    if unknown:
        raise FormError(unknown[0], f"cannot be changed here; known: {', '.join(sorted(allowed))}")
    return dict(form)

