"""Small JSON records on disk (attempt records, cgroup placements, Slurm job
ids): written whole or not at all, read as None when absent."""
from __future__ import annotations

import json
import os
from typing import Optional


def read_json(path: str) -> Optional[dict]:
    """The record, or None when it is missing or not JSON (a reader never
    crashes on one bad file)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def write_json(path: str, data: dict, mode: int = 0o644) -> None:
    """Write all of it or nothing: a reader never sees half a record.

    The directory may be writable by a job's account (the sticky bit keeps
    our files ours): the temporary file is made afresh, never through a
    link the job left in its place."""
    tmp = f"{path}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
