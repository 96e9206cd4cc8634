"""The deploy form's JSON → the service's deployment body, and the
service's deployment views → what the front end shows (model directories
in this server's file tree).

Only ``model_dir`` is this server's business (a path the browser names
relative to the server's files); every other field goes to the service
as it is, and the service's own checks (name, replicas, traffic) answer.
"""
from __future__ import annotations

import os
from typing import Any

from .jobspec import FormError, inside_root, relative_path

# The files MLServer's scikit-learn runtime loads from a model directory.
SKLEARN_MODEL_FILES = ("model.joblib", "model.pickle", "model.pkl")
DEFAULT_PREDICTOR = "predictor.py:Model"


def has_model(full_dir: str) -> bool:
    """Whether a directory holds what one of the runtimes loads with its
    defaults: a scikit-learn model file, or the default predictor's file."""
    names = (*SKLEARN_MODEL_FILES, DEFAULT_PREDICTOR.partition(":")[0])
    return any(os.path.isfile(os.path.join(full_dir, f)) for f in names)


def model_path_of(job: dict, root_dir: str) -> "str | None":
    """Where "Deploy outputs…" of a succeeded job finds a model: its output
    directory, checkpoint directory or working directory, the first that
    holds one (paths relative to the server's root, as ``describe`` makes
    them); None for a job that did not succeed or wrote no model."""
    if job.get("state") != "succeeded":
        return None
    for key in ("output_dir_path", "checkpoint_path", "working_dir_path"):
        rel = job.get(key)
        if rel is not None and has_model(os.path.join(root_dir, rel)):
            return rel
    return None


def _check_model_files(full_dir: str, rel_dir: str, form: dict) -> None:
    """Refuse a directory the chosen runtime cannot load, now rather than
    after the replicas failed to start five times each."""
    runtime = form.get("runtime", "sklearn")
    shown = rel_dir or "the top folder"
    if runtime == "sklearn":
        if not any(os.path.isfile(os.path.join(full_dir, f)) for f in SKLEARN_MODEL_FILES):
            raise FormError("model_dir", f"{shown} has no {' / '.join(SKLEARN_MODEL_FILES)} "
                                         f"(the sklearn runtime loads one of them)")
    elif runtime == "predictor":
        predictor = form.get("predictor") or DEFAULT_PREDICTOR
        filename = predictor.partition(":")[0] if isinstance(predictor, str) else ""
        if filename and not os.path.isfile(os.path.join(full_dir, filename)):
            raise FormError("predictor", f"there is no {filename} in {shown}")


def build_body(form: Any, root_dir: str, service_root: str) -> dict:
    """The service's deploy body: the form with ``model_dir`` as the jobs
    (and so the replicas) see it."""
    if not isinstance(form, dict):
        raise FormError("body", "must be a JSON object with at least name and model_dir")
    rel = relative_path(root_dir, form.get("model_dir"), "model_dir", must_exist="dir")
    _check_model_files(os.path.join(root_dir, rel), rel, form)
    return {**form, "model_dir": os.path.join(service_root, rel) if rel else service_root}


def describe(view: dict, service_root: str) -> dict:
    """The deployment with each revision's ``model_path`` relative to the
    server's root (None when the model lives elsewhere)."""
    out = dict(view)
    out["revisions"] = [{**r, "model_path": inside_root(r.get("model_dir"), service_root)}
                        for r in view.get("revisions", [])]
    return out
