"""Sweeps as users send them (``POST /sweeps``): parsing, the expansion of
a grid or a list into tasks, and each task's job spec. Pure.

A notebook template gets each task's parameters merged into its papermill
``parameters``; a command template gets each as the environment variable
``GPUHUB_PARAM_<NAME>`` (upper case) and in place of ``{name}`` in its
arguments. Either way ``GPUHUB_SWEEP_ID`` and ``GPUHUB_SWEEP_INDEX`` are set.
"""
from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Optional

from gpuspawner.vocab.specs import (ENV_NAME_RE, MAX_PARAMETERS, NAME_RE, JobSpec, Limits, SpecError,
                    parse_after, parse_job, suffixed_notebook)

MAX_TASKS = 10000
MAX_PARAMS = 64
GOALS = ("max", "min")
FIELDS = ("name", "team", "template", "grid", "tasks", "max_running", "metric", "after")
SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class SweepSpec:
    template: JobSpec
    tasks: tuple  # of parameter dicts, by index
    name: str = ""
    max_running: Optional[int] = None
    metric: Optional[dict] = None
    after: tuple = ()


def expand(grid: Any, tasks: Any) -> list[dict]:
    """The tasks' parameters: the cartesian product of ``grid`` (its keys'
    order, the last one varying fastest) or the list ``tasks``."""
    if (grid is None) == (tasks is None):
        raise SpecError("grid", "give exactly one of 'grid' (param: [values]) or 'tasks' "
                                "([{param: value}])")
    if grid is not None:
        if not isinstance(grid, dict) or not grid:
            raise SpecError("grid", "must be a non-empty object of param: [values]")
        for name, values in grid.items():
            _check_name(name, "grid")
            if not isinstance(values, list) or not values:
                raise SpecError(f"grid.{name}", "must be a non-empty list of values")
        size = math.prod(len(v) for v in grid.values())
        if size > MAX_TASKS:
            raise SpecError("grid", f"makes {size} tasks; at most {MAX_TASKS}")
        names = list(grid)
        return [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]
    if not isinstance(tasks, list) or not tasks:
        raise SpecError("tasks", "must be a non-empty list of {param: value} objects")
    if len(tasks) > MAX_TASKS:
        raise SpecError("tasks", f"has {len(tasks)} tasks; at most {MAX_TASKS}")
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise SpecError(f"tasks[{i}]", "must be an object of param: value")
        for name in task:
            _check_name(name, f"tasks[{i}]")
    return [dict(t) for t in tasks]


def _check_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name) or len(name) > 64:
        raise SpecError(where, f"parameter name {name!r} must be letters, digits and '_' "
                               f"(not starting with a digit; at most 64)")


def parse_sweep(body: Any, limits: Limits = Limits()) -> SweepSpec:
    """Validate a ``POST /sweeps`` body. Raises ``SpecError`` naming the field."""
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise SpecError(unknown[0], f"is not a known field; known fields: {', '.join(FIELDS)}")
    raw = body.get("template")
    if not isinstance(raw, dict):
        raise SpecError("template", "is required: the job spec every task runs")
    if "after" in raw:
        raise SpecError("template.after", "give the sweep's 'after', not the template's")
    name = body.get("name", raw.get("name")) or ""
    if not isinstance(name, str) or (name and not NAME_RE.fullmatch(name)) or len(name) > 100:
        raise SpecError("name", "may use letters, digits, '.', '_' and '-' (at most 100)")
    team = body.get("team")
    if team is not None and not isinstance(team, str):
        raise SpecError("team", "must be a string")
    try:
        template = parse_job({**raw, "name": name, **({"team": team} if team else {})}, limits)
    except SpecError as e:
        raise SpecError(f"template.{e.field}", e.message) from None
    tasks = expand(body.get("grid"), body.get("tasks"))
    for i, params in enumerate(tasks):
        _check_values(template, params, i)
    max_running = body.get("max_running")
    if max_running is not None and (isinstance(max_running, bool) or not isinstance(
            max_running, int) or not 1 <= max_running <= MAX_TASKS):
        raise SpecError("max_running", f"must be a whole number from 1 to {MAX_TASKS}, or null")
    return SweepSpec(template=template, tasks=tuple(tasks), name=name, max_running=max_running,
                     metric=_metric(body.get("metric")),
                     after=tuple(parse_after(body.get("after"))))


def _check_values(template: JobSpec, params: dict, index: int) -> None:
    if len(params) > MAX_PARAMS:
        raise SpecError(f"tasks[{index}]", f"has more than {MAX_PARAMS} parameters")
    if template.notebook is not None:
        size = len(json.dumps({**template.parameters, **params}))
        if size > MAX_PARAMETERS:
            raise SpecError(f"tasks[{index}]", f"parameters are {size} bytes as JSON; at most "
                                               f"{MAX_PARAMETERS}")
        return
    for name, value in params.items():
        if not isinstance(value, SCALARS) or (isinstance(value, str) and "\x00" in value):
            raise SpecError(f"tasks[{index}].{name}", "a command's parameters must be strings, "
                                                      "numbers or booleans (they become "
                                                      "environment variables and arguments)")


def _metric(value: Any) -> Optional[dict]:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"name", "goal"}:
        raise SpecError("metric", "must be {name, goal} with goal 'max' or 'min'")
    name, goal = value.get("name"), value.get("goal", "max")
    if not isinstance(name, str) or not 0 < len(name) <= 128:
        raise SpecError("metric.name", "must be a name of at most 128 characters")
    if goal not in GOALS:
        raise SpecError("metric.goal", f"must be 'max' or 'min', got {goal!r}")
    return {"name": name, "goal": goal}


def text_of(value: Any) -> str:
    """A parameter as an environment variable or an argument: strings as
    they are, numbers and booleans as JSON (0.01, true)."""
    return value if isinstance(value, str) else json.dumps(value)


def task_spec(template: JobSpec, params: dict, sweep_id: str, index: int) -> JobSpec:
    """The job spec of the sweep's task ``index``."""
    env = {**template.env, "GPUHUB_SWEEP_ID": sweep_id, "GPUHUB_SWEEP_INDEX": str(index)}
    name = f"{template.name or 'sweep'}-{index}"
    if template.notebook is not None:
        return replace(template, name=name, env=env, output_notebook=task_output(template, index),
                       parameters={**template.parameters, **params})
    env.update({f"GPUHUB_PARAM_{k.upper()}": text_of(v) for k, v in params.items()})
    command = template.command
    if params and command:
        pattern = re.compile(r"\{(" + "|".join(map(re.escape, params)) + r")\}")
        command = tuple(pattern.sub(lambda m: text_of(params[m.group(1)]), arg)
                        for arg in command)
    return replace(template, name=name, env=env, command=command)


def task_output(template: JobSpec, index: int) -> Optional[str]:
    """A task's own executed notebook: the template's with ``-<index>``
    before its extension (``out/nb.ipynb`` → ``out/nb-3.ipynb``), so tasks
    do not write over each other's (None: the attempt's directory)."""
    if not template.output_notebook:
        return None
    return suffixed_notebook(template.output_notebook, str(index))


def best_index(values: dict[int, float], goal: str) -> Optional[int]:
    """The index whose metric is best (the lowest index among ties)."""
    if not values:
        return None
    pick = max if goal == "max" else min
    best = pick(values.values())
    return min(i for i, v in values.items() if v == best)
