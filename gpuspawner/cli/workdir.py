"""Where a job that ``gpuhub submit`` sends runs, seen from the shell that
sends it. Jobs run in the user's workspace (``GET /me``'s ``workspace``)
unless they name a working_dir: from a directory of the workspace (a
notebook server's terminal) the job runs there; from anywhere else the
paths the command names relative to here would not be found, so the user
is told before the job is submitted. Pure but for looking at the files."""
from __future__ import annotations

import os
import shlex
from typing import Callable, Optional, Sequence


def command_words(spec: dict) -> list[str]:
    """The words of a job spec that may name files: the command's (a shell
    string split as the shell would) and the notebook."""
    command = spec.get("command")
    if isinstance(command, str):
        try:
            words = shlex.split(command)
        except ValueError:  # unbalanced quotes: the service says so
            words = []
    else:
        words = list(command or [])
    return words + ([spec["notebook"]] if spec.get("notebook") else [])


def job_directory(cwd: str, workspace: str, words: Sequence[str],
                  exists: Callable[[str], bool] = os.path.exists
                  ) -> tuple[Optional[str], list[str]]:
    """(the working_dir to send, the files the job will not find) for a job
    submitted from ``cwd`` without --workdir. In the workspace: ``cwd``
    relative to it (None at its top, the default). Elsewhere: no working_dir
    (the job runs at the workspace's top), and the words that are relative
    paths of files here but not there."""
    inside = os.path.relpath(os.path.realpath(cwd), os.path.realpath(workspace))
    if inside == ".":
        return None, []
    if inside != ".." and not inside.startswith(".." + os.sep):
        return inside, []
    missing = [w for w in words
               if w and not w.startswith("-") and not os.path.isabs(w)
               and exists(os.path.join(cwd, w)) and not exists(os.path.join(workspace, w))]
    return None, missing


def elsewhere_warning(cwd: str, workspace: str, missing: Sequence[str]) -> str:
    first = missing[0]
    return (f"warning: the job runs in your workspace {workspace}, not here ({cwd}): "
            f"it will not find {', '.join(missing)} there. Give the full path "
            f"(\"$PWD/{first}\") if your account can read it, or copy it into the "
            f"workspace and submit from there (or name a directory of it with --workdir).")
