"""The submit form's JSON → the service's job spec, and the service's
workloads → what the front end shows (paths in this server's file tree).

Pure functions of the form, the server's root directory (as this server sees
it) and the service root (the same directory as the jobs see it).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import time
from typing import Any, Optional

# How scripts run; the interpreter is looked up on the job's PATH.
INTERPRETERS = {".py": "python", ".sh": "bash"}
NOTEBOOK = ".ipynb"
KNOWN_FIELDS = {"path", "name", "team", "pool", "gpus_per_node", "gpus", "nodes", "time_limit", "priority",
                "parameters", "env", "output_dir", "checkpoint_dir", "project", "after",
                "gpu_share", "datasets"}
# How a workload may wait for another (or a sweep): its success, its end, its failure.
CONDITIONS = ("ok", "any", "failed")
# The job finds its output directory here (GPUHUB_* names are the service's).
OUTPUT_DIR_ENV = "OUTPUT_DIR"
_NAME_OK = re.compile(r"[^A-Za-z0-9._-]+")
_ARG = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


class FormError(Exception):
    """A field of the form is wrong: 400 with the field's name."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def relative_path(root_dir: str, path: Any, field: str, *, must_exist: str = "") -> str:
    """``path`` (relative to the server's root, as the front end names
    files) normalised; refused when it leaves the root. ``must_exist``:
    "file" or "dir" when it must already be one."""
    if not isinstance(path, str) or not path.strip():
        raise FormError(field, "is required" if not path else "must be a path")
    norm = posixpath.normpath(path.strip().lstrip("/"))
    if norm.startswith("..") or os.path.isabs(norm):
        raise FormError(field, f"{path!r} is outside this server's files")
    full = os.path.join(root_dir, norm)
    if must_exist == "file" and not os.path.isfile(full):
        raise FormError(field, f"{path!r} is not a file")
    if must_exist == "dir" and not os.path.isdir(full):
        raise FormError(field, f"{path!r} is not a directory")
    return "" if norm == "." else norm


def _optional_text(form: dict, key: str, max_len: int = 255) -> Optional[str]:
    value = form.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise FormError(key, f"must be text of at most {max_len} characters")
    return value.strip()


def dependencies(value: Any) -> list[dict]:
    """``[{id, condition}]``: which workloads or sweeps to wait for. Whether
    they exist (and whether they make a cycle) is the service's to say."""
    if value in (None, []):
        return []
    if not isinstance(value, list):
        raise FormError("after", "must be a list of {id, condition}")
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            raise FormError("after", "each entry needs the id of a job or a sweep")
        condition = item.get("condition", "ok")
        if condition not in CONDITIONS:
            raise FormError("after", f"condition must be one of {', '.join(CONDITIONS)}, "
                                     f"not {condition!r}")
        out.append({"id": item["id"], "condition": condition})
    return out


def default_name(path: str) -> str:
    stem = posixpath.splitext(posixpath.basename(path))[0]
    name = _NAME_OK.sub("-", stem).strip("-._").lower()[:128]
    return name or "job"


def script_args(parameters: dict) -> list[str]:
    """Parameters of a script as ``--name=value`` arguments (JSON for
    anything but text), the way argparse reads them."""
    return [f"--{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in parameters.items()]


def build_spec(form: Any, root_dir: str, service_root: str,
               now: Optional[float] = None) -> tuple[dict, list[str]]:
    """The service's job spec for a submit form, and the directories (in
    this server's tree) to create before submitting it."""
    if not isinstance(form, dict):
        raise FormError("body", "must be a JSON object")
    unknown = sorted(set(form) - KNOWN_FIELDS)
    if unknown:
        raise FormError(unknown[0], f"is not a field of the submit form; known: "
                                    f"{', '.join(sorted(KNOWN_FIELDS))}")
    path = relative_path(root_dir, form.get("path"), "path", must_exist="file")
    ext = posixpath.splitext(path)[1].lower()
    if ext != NOTEBOOK and ext not in INTERPRETERS:
        raise FormError("path", f"{path!r} is not a notebook (.ipynb), Python (.py) or "
                                f"shell (.sh) file")
    parameters = form.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise FormError("parameters", "must be an object of name: value")
    env = form.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise FormError("env", "must be an object of NAME: text")
    folder, filename = posixpath.split(path)
    working_dir = os.path.join(service_root, folder)
    spec: dict[str, Any] = {
        "name": _optional_text(form, "name", 128) or default_name(path),
        "working_dir": working_dir,
        # Counts and their limits are the service's to check (its refusal names
        # the field): the extension checks what only it can, the file paths.
        # "gpus" is the older name, read for one more release.
        "gpus_per_node": form.get("gpus_per_node", form.get("gpus", 1)),
        "nodes": form.get("nodes", 1),
    }
    if form.get("gpu_share") not in (None, ""):  # part of one GPU ("1/4"), the service's to check
        spec["gpu_share"] = form["gpu_share"]
    datasets = form.get("datasets") or []
    if not isinstance(datasets, list) or not all(isinstance(d, str) and d for d in datasets):
        raise FormError("datasets", "must be a list of dataset names")
    if datasets:  # which exist and which the team may read is the service's to say
        spec["datasets"] = datasets
    for key in ("team", "pool", "priority", "project"):
        value = _optional_text(form, key, 64)
        if value:
            spec[key] = value
    time_limit = form.get("time_limit")
    if time_limit not in (None, ""):
        if isinstance(time_limit, bool) or not isinstance(time_limit, (str, int, float)):
            raise FormError("time_limit", "must be seconds or a duration such as 2h30m")
        spec["time_limit"] = time_limit
    make_dirs: list[str] = []
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    # One output directory per job unless the form names one.
    output_dir = relative_path(root_dir, form.get("output_dir")
                               or f"outputs/{spec['name']}-{stamp}", "output_dir")
    make_dirs.append(output_dir)
    env = {**env, OUTPUT_DIR_ENV: os.path.join(service_root, output_dir)}
    if form.get("checkpoint_dir"):
        checkpoint = relative_path(root_dir, form["checkpoint_dir"], "checkpoint_dir")
        make_dirs.append(checkpoint)
        spec["checkpoint_dir"] = os.path.join(service_root, checkpoint)
    if ext == NOTEBOOK:
        stem = posixpath.splitext(filename)[0]
        spec["notebook"] = filename
        spec["parameters"] = parameters
        spec["output_notebook"] = os.path.join(service_root, output_dir,
                                               f"{stem}-{stamp}.ipynb")
    else:
        spec["command"] = [INTERPRETERS[ext], filename, *script_args(parameters)]
    spec["env"] = env
    after = dependencies(form.get("after"))
    if after:
        spec["after"] = after
    return spec, make_dirs


def inside_root(path: Optional[str], service_root: str) -> Optional[str]:
    """``path`` (as the jobs see it) relative to the server's root, or None
    when it is elsewhere."""
    if not path:
        return None
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(service_root))
    if rel.startswith(".."):
        return None
    return rel.replace(os.sep, "/")


def describe(workload: dict, service_root: str) -> dict:
    """The workload with the paths the front end opens: ``source_path``
    (the notebook or script), ``output_path`` (the executed notebook),
    ``output_dir_path``, ``checkpoint_path`` and ``working_dir_path`` —
    relative to the server's root, or None when outside it. Script
    arguments read back as parameters."""
    out = dict(workload)
    wd = workload.get("working_dir") or ""
    command = workload.get("command") or []
    source = None
    if workload.get("notebook"):
        source = os.path.join(wd, workload["notebook"])
    elif len(command) >= 2 and command[0] in INTERPRETERS.values():
        source = os.path.join(wd, command[1])
        args = [_ARG.match(a) for a in command[2:]]
        if args and all(args):
            out["parameters"] = {m.group(1): _json_or_text(m.group(2)) for m in args}
    out["source_path"] = inside_root(source, service_root)
    out["output_path"] = inside_root(workload.get("output_notebook"), service_root)
    out["output_dir_path"] = inside_root((workload.get("env") or {}).get(OUTPUT_DIR_ENV),
                                         service_root)
    out["checkpoint_path"] = inside_root(workload.get("checkpoint_dir"), service_root)
    out["working_dir_path"] = inside_root(wd, service_root)
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
