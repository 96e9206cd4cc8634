"""Job specs as users send them: parsing and validation.

Pure: a JSON object in, a ``JobSpec`` or a ``SpecError`` naming the field
out. What needs the live cluster (does the pool exist, may the team use it)
is checked by the engine, which raises the same error type.
"""
from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from gpuspawner.durations import seconds_of
import gpuspawner.isolation.resources as resources
from gpuspawner.isolation.gpu_rules import LimitError
from gpuspawner.isolation.gpu_rules import Limits as Resources
from gpuspawner.scheduler.workflow.dependencies import CONDITIONS, MAX_AFTER, OK, TARGET_RE
from gpuspawner.scheduler.model import JOB, NOTEBOOK, TOPOLOGY_MODES, TOPOLOGY_NONE
from gpuspawner.vocab.errors import SpecError
from gpuspawner.vocab.datasets import parse_names
from gpuspawner.vocab.shares import parse_share

# Matched with fullmatch: a pattern's "$" would let a trailing newline through.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The service sets these; a job may not override them.
RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
RESERVED_ENV_PREFIX = "GPUHUB_"
# The dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...): never
# taken from a request, whoever ends up running with it (a command may set
# them for itself).
LOADER_ENV_PREFIX = "LD_"
MAX_GPUS_PER_NODE = 64
MAX_NODES = 1024
MAX_ENV = 256
MAX_TEXT = 64 * 1024
# Notebook parameters are one argument of papermill's command line, and Linux
# takes no single argument over 128 KiB (MAX_ARG_STRLEN).
MAX_PARAMETERS = 64 * 1024

FIELDS = ("name", "kind", "command", "notebook", "parameters", "output_notebook", "working_dir",
          "env", "pool", "gpus", "gpus_per_node", "nodes", "topology", "topology_key", "time_limit",
          "priority", "checkpoint_dir", "project", "team", "grace_period", "after", "gpu_share",
          "gpu_memory", "cpus", "memory", "datasets")
TOPOLOGY_KEY_RE = re.compile(r"[A-Za-z0-9._/-]{1,64}")


@dataclass(frozen=True)
class Limits:
    """What the operator allows (from the service's config)."""

    max_time_limit: float = 7 * 24 * 3600.0
    default_time_limit: Optional[float] = 24 * 3600.0
    max_grace_period: float = 3600.0
    default_pool: str = ""
    # kind -> what a workload of that kind asks for when it does not say
    # (CPUs, memory: WorkloadResources)
    requests: Mapping[str, Resources] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSpec:
    kind: str
    pool: str
    gpus_per_node: int
    nodes: int
    name: str = ""
    command: Optional[tuple[str, ...]] = None
    shell: bool = False
    notebook: Optional[str] = None
    parameters: dict = field(default_factory=dict)
    output_notebook: Optional[str] = None
    working_dir: Optional[str] = None
    env: dict = field(default_factory=dict)
    time_limit: Optional[float] = None
    priority: str = ""
    checkpoint_dir: Optional[str] = None
    project: str = ""
    team: Optional[str] = None
    grace_period: Optional[float] = None
    topology: str = TOPOLOGY_NONE
    topology_key: str = "switch"
    # What it waits for: ({"id", "condition"}, ...) (dependencies.parse_after)
    after: tuple = ()
    # Part of one GPU instead of whole GPUs (share_specs.ShareRequest), which
    # the engine resolves against its pool's slots.
    share: Any = None
    # CPUs and memory per node (resources.py), None: not asked (a request
    # parsed without the service's defaults)
    resources: Optional[Resources] = None
    # The datasets it reads (vocab/datasets.py), each mounted read-only at /datasets/<name>.
    datasets: tuple[str, ...] = ()

    def stored(self) -> dict[str, Any]:
        """What is kept in the workload's ``spec`` column."""
        return {**({"resources": resources.stored(self.resources)} if self.resources else {}),
                "command": list(self.command) if self.command else None, "shell": self.shell,
                "notebook": self.notebook, "parameters": self.parameters,
                "output_notebook": self.output_notebook, "working_dir": self.working_dir,
                "env": self.env, "checkpoint_dir": self.checkpoint_dir,
                **({"topology": self.topology, "topology_key": self.topology_key}
                   if self.topology != TOPOLOGY_NONE else {}),
                **({"datasets": list(self.datasets)} if self.datasets else {})}


def parse_duration(value: Any, field_name: str) -> float:
    """Seconds from a number or a string such as "90", "45m", "2h30m", "1d"
    (``durations.seconds_of``), more than none."""
    try:
        seconds = seconds_of(value)
    except ValueError as e:
        raise SpecError(field_name, f"must be a number of seconds or a duration such as "
                                    f"'2h30m' ({e})") from None
    if seconds <= 0:
        raise SpecError(field_name, f"must be positive, got {value!r}")
    return seconds


def _gpus_per_node(body: dict) -> int:
    """``gpus_per_node``, or under its older name ``gpus`` (read for one more
    release); both, differing, is a contradiction."""
    if "gpus_per_node" in body:
        gpus = _int(body, "gpus_per_node", 1, 0, MAX_GPUS_PER_NODE)
        if "gpus" in body and _int(body, "gpus", 1, 0, MAX_GPUS_PER_NODE) != gpus:
            raise SpecError("gpus", "is the older name of gpus_per_node: give one of them")
        return gpus
    return _int(body, "gpus", 1, 0, MAX_GPUS_PER_NODE)


def _int(body: dict, key: str, default: int, low: int, high: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(key, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise SpecError(key, f"must be between {low} and {high}, got {value}")
    return value


def _text(body: dict, key: str, max_len: int = 255, required: bool = False) -> Optional[str]:
    value = body.get(key)
    if value is None:
        if required:
            raise SpecError(key, "is required")
        return None
    if not isinstance(value, str):
        raise SpecError(key, f"must be a string, got {type(value).__name__}")
    if len(value) > max_len:
        raise SpecError(key, f"is longer than {max_len} characters")
    if "\x00" in value:
        raise SpecError(key, "must not contain NUL characters")
    return value


def _command(body: dict) -> tuple[Optional[tuple[str, ...]], bool]:
    value = body.get("command")
    if value is None:
        return None, False
    if isinstance(value, str):
        if not value.strip():
            raise SpecError("command", "must not be empty")
        if len(value) > MAX_TEXT or "\x00" in value:
            raise SpecError("command", f"must be at most {MAX_TEXT} characters without NUL")
        return (value,), True
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        if not value[0].strip():
            raise SpecError("command", "must start with the program to run, not an empty string")
        if sum(len(a) for a in value) > MAX_TEXT or any("\x00" in a for a in value):
            raise SpecError("command", f"must be at most {MAX_TEXT} characters without NUL")
        return tuple(value), False
    raise SpecError("command", "must be a shell command string or a non-empty list of strings")


def _env(body: dict) -> dict[str, str]:
    value = body.get("env", {})
    if not isinstance(value, dict):
        raise SpecError("env", "must be an object of NAME: value strings")
    if len(value) > MAX_ENV:
        raise SpecError("env", f"has more than {MAX_ENV} variables")
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            raise SpecError(f"env.{name}", "is not a valid environment variable name")
        if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX):
            raise SpecError(f"env.{name}", "is set by GPU Hub and cannot be overridden")
        if name.startswith(LOADER_ENV_PREFIX):
            raise SpecError(f"env.{name}", "is a dynamic-loader variable (LD_*), which GPU Hub "
                                           "does not take from a job's env: set it in the "
                                           "command itself (env LD_PRELOAD=... python train.py)")
        if not isinstance(val, str) or "\x00" in val or len(val) > MAX_TEXT:
            raise SpecError(f"env.{name}", "must be a string")
    return dict(value)


SERVER_FIELDS = ("kind", "user", "team", "pool", "gpus", "gpus_per_node", "name", "priority",
                 "project", "gpu_share", "gpu_memory", "cpus", "memory", "datasets")


def _resources(body: dict, limits: Limits, kind: str) -> Optional[Resources]:
    """``cpus`` and ``memory``, the kind's default where not given (None
    when the service configured no defaults and nothing was asked)."""
    default = limits.requests.get(kind, Resources())
    try:
        asked = resources.parse_request(body, default)
    except LimitError as e:
        field_name, _, message = str(e).partition(": ")
        raise SpecError(field_name, message) from None
    return asked if asked else None


def parse_server(body: Any, limits: Limits = Limits()) -> JobSpec:
    """A notebook server's GPUs, asked for by a spawner on a user's behalf.
    The spawner runs the server; the scheduler only admits and accounts."""
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object")
    unknown = sorted(set(body) - set(SERVER_FIELDS))
    if unknown:
        raise SpecError(unknown[0], f"is not a known field of a notebook server; known fields: "
                                    f"{', '.join(SERVER_FIELDS)}")
    name = _text(body, "name") or ""
    if name and not NAME_RE.fullmatch(name):
        raise SpecError("name", "may use letters, digits, '.', '_' and '-' (at most 128)")
    return JobSpec(kind=NOTEBOOK, pool=_text(body, "pool", 64) or limits.default_pool,
                   gpus_per_node=_gpus_per_node(body), nodes=1, name=name,
                   time_limit=None, priority=_text(body, "priority", 64) or "interactive",
                   project=_text(body, "project", 255) or "", team=_text(body, "team", 128),
                   share=parse_share(body), resources=_resources(body, limits, NOTEBOOK),
                   datasets=parse_names(body.get("datasets")))


def suffixed_notebook(path: str, suffix: str) -> str:
    """``path`` with ``-<suffix>`` before its extension (``out/nb.ipynb`` →
    ``out/nb-3.ipynb``): one run's executed notebook beside its siblings'."""
    stem, ext = posixpath.splitext(path)
    return f"{stem}-{suffix}{ext or '.ipynb'}"


def parse_job(body: Any, limits: Limits = Limits()) -> JobSpec:
    """Validate a submitted job. Raises ``SpecError`` naming the field."""
    if not isinstance(body, dict):
        raise SpecError("body", "must be a JSON object")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise SpecError(unknown[0], f"is not a known field; known fields: {', '.join(FIELDS)}")
    kind = body.get("kind", JOB)
    if kind != JOB:
        raise SpecError("kind", f"only 'job' can be submitted by users; {kind!r} workloads are "
                                f"started by the hub's spawner or the deployments API")
    name = _text(body, "name") or ""
    if name and not NAME_RE.fullmatch(name):
        raise SpecError("name", "may use letters, digits, '.', '_' and '-' (at most 128)")
    command, shell = _command(body)
    notebook = _text(body, "notebook", 4096)
    if (command is None) == (notebook is None):
        raise SpecError("command", "give exactly one of 'command' or 'notebook'")
    if notebook is not None and not notebook.strip():
        raise SpecError("notebook", "must be the path of a notebook, not empty")
    parameters = _parameters(body, notebook)
    output_notebook = _text(body, "output_notebook", 4096)
    if output_notebook and notebook is None:
        raise SpecError("output_notebook", "only applies to a notebook job")
    pool = _text(body, "pool", 64) or limits.default_pool
    if not pool:
        raise SpecError("pool", "is required (no default pool is configured)")
    time_limit = _duration(body, "time_limit", limits.default_time_limit, limits.max_time_limit)
    grace = _duration(body, "grace_period", None, limits.max_grace_period)
    return JobSpec(
        kind=kind, pool=pool, name=name,
        gpus_per_node=_gpus_per_node(body),
        nodes=_int(body, "nodes", 1, 1, MAX_NODES),
        command=command, shell=shell, notebook=notebook, parameters=parameters,
        output_notebook=output_notebook,
        working_dir=_text(body, "working_dir", 4096),
        env=_env(body), time_limit=time_limit,
        priority=_text(body, "priority", 64) or "",
        checkpoint_dir=_text(body, "checkpoint_dir", 4096),
        project=_text(body, "project", 255) or "",
        team=_text(body, "team", 128), grace_period=grace, **_topology(body),
        after=tuple(parse_after(body.get("after"))), share=parse_share(body),
        resources=_resources(body, limits, JOB), datasets=parse_names(body.get("datasets")))


def _parameters(body: dict, notebook: Optional[str]) -> dict:
    """A notebook job's parameters: an object, small enough for papermill's command line."""
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise SpecError("parameters", "must be an object of notebook parameters")
    if parameters and notebook is None:
        raise SpecError("parameters", "only apply to a notebook job")
    size = len(json.dumps(parameters))
    if size > MAX_PARAMETERS:
        raise SpecError("parameters", f"are {size} bytes as JSON; at most {MAX_PARAMETERS} "
                                      f"(they go on papermill's command line): pass larger "
                                      f"inputs as a file in your workspace")
    return parameters


def _duration(body: dict, field_name: str, default: Optional[float],
              most: float) -> Optional[float]:
    """A duration field (``2h30m``, seconds) up to ``most`` seconds."""
    if body.get(field_name) is None:
        return default
    seconds = parse_duration(body[field_name], field_name)
    if seconds > most:
        raise SpecError(field_name, f"{seconds:.0f} seconds is above the maximum of "
                                    f"{most:.0f} seconds")
    return seconds


def _topology(body: dict) -> dict:
    """``topology`` (none, preferred, required) and its ``topology_key``."""
    mode = body.get("topology", TOPOLOGY_NONE)
    if mode not in TOPOLOGY_MODES:
        raise SpecError("topology", f"must be one of {', '.join(TOPOLOGY_MODES)}, got {mode!r}")
    key = body.get("topology_key", "switch")
    if not isinstance(key, str) or not TOPOLOGY_KEY_RE.fullmatch(key):
        raise SpecError("topology_key", f"must be a topology level such as 'switch' or 'rack' "
                                        f"(letters, digits, . _ / -; at most 64), got {key!r}")
    return {"topology": mode, "topology_key": key}


def parse_after(value: Any, field_name: str = "after") -> list[dict]:
    """``after`` as sent: a list of {id, condition?} (condition "ok" when
    left out). Duplicates are dropped; the same id under two conditions is
    kept, and both must be met."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(field_name, "must be a list of {id, condition} objects")
    if len(value) > MAX_AFTER:
        raise SpecError(field_name, f"has {len(value)} entries; at most {MAX_AFTER}")
    out: list[dict] = []
    for i, dep in enumerate(value):
        where = f"{field_name}[{i}]"
        if not isinstance(dep, dict) or set(dep) - {"id", "condition"}:
            raise SpecError(where, "must be an object with 'id' and optionally 'condition'")
        target, condition = dep.get("id"), dep.get("condition", OK)
        if not isinstance(target, str) or not TARGET_RE.fullmatch(target):
            raise SpecError(f"{where}.id", f"must be a workload id (w + 12 hex digits) or a "
                                           f"sweep id (s + 12 hex digits), got {target!r}")
        if condition not in CONDITIONS:
            raise SpecError(f"{where}.condition", f"must be one of {', '.join(CONDITIONS)}, "
                                                  f"got {condition!r}")
        entry = {"id": target, "condition": condition}
        if entry not in out:
            out.append(entry)
    return out


def parse_workload(body: Any, limits: Limits = Limits()) -> JobSpec:
    """A ``POST /workloads`` body, by its kind: a user's job, or (any other
    kind) the GPUs of a notebook server asked by the hub's spawner."""
    if isinstance(body, dict) and body.get("kind", JOB) != JOB:
        return parse_server(body, limits)
    return parse_job(body, limits)
