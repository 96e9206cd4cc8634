"""Small JSON records on disk (attempt records, cgroup placements, Slurm job
ids): written whole or not at all, read as None when absent.

Many live in directories a job's account can write to (an attempt
directory): they are read through gpuspawner/safefiles.py, so a record a
user planted, a link or a FIFO in its place is no record at all."""
from __future__ import annotations

import json
import os
from typing import Optional

from .safefiles import read_own

MAX_RECORD = 1 << 20


def read_json(path: str, max_bytes: int = MAX_RECORD) -> Optional[dict]:
    """The record, or None when it is missing, not JSON, larger than
    ``max_bytes``, or not this process's own regular file (a reader never
    crashes, blocks or fills its memory on one bad file)."""
    data = read_own(path, limit=max_bytes + 1)
    if data is None or len(data) > max_bytes:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _new_file_beside(path: str) -> tuple[int, str]:
    """A new file of a random name in ``path``'s directory, opened as
    ``tempfile.mkstemp`` does (mode 0600, never through a link, failing
    rather than opening what is there). Not tempfile itself: the runner
    writes its records with this module, and every start paid for
    importing tempfile (and shutil, random)."""
    folder, name = os.path.dirname(path) or ".", os.path.basename(path)
    for _ in range(100):
        tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def write_json(path: str, data: dict, mode: int = 0o644, durable: bool = True) -> None:
    """Write all of it or nothing: a reader never sees half a record.

    The directory may be writable by a job's account (the sticky bit keeps
    our files ours): the temporary file has a random name, made afresh
    (never through a link the job left, nor one it can guess).

    ``durable``: on disk before it is in place, so that it outlasts a power
    cut (an exit record). A record of a process, which a power cut ends
    too (its pid, its environment, its cgroups), needs it not: after a cut
    it is missing or unreadable, which reads as the process being gone.
    Each fsync was 1 to 10 ms of a job's start."""
    fd, tmp = _new_file_beside(path)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
