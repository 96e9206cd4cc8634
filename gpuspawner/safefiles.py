"""Files the service (often root) opens in directories a user's account can
write to: an attempt directory is the job's (mode 1770), a Slurm job's log
is written by the job.

Opened by name, such a file may be whatever the user left there: a link
to /etc/shadow or /dev/zero, a FIFO that blocks the opener forever, a file
of the user's own that claims to be the runner's record. So the service
opens them only through here: never through a symbolic link (O_NOFOLLOW),
never blocking (O_NONBLOCK), and uses what it opened only if it is a
regular file with one name, owned by this process's uid (everything the
service and its root runners write is; nothing a user makes can be).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional



def _ignoring(path: str, why: str) -> None:
    # logging is imported here, not above: the runner imports this module,
    # and every start pays for what it imports.
    import logging
    logging.getLogger(__name__).warning("ignoring %s: %s", path, why)


def open_own(path: str) -> Optional[int]:
    """A read-only descriptor of ``path`` if it is a regular file of this
    process's uid, else None (missing, or not one to trust: said in the log)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            _ignoring(path, "a symbolic link")
        elif e.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise
        return None
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "not a regular file"
    elif st.st_uid != os.geteuid():
        why = f"owned by uid {st.st_uid}, not {os.geteuid()}"
    elif st.st_nlink != 1:
        why = f"{st.st_nlink} hard links to it"
    if why is None:
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    _ignoring(path, why)
    return None


def create_own(path: str, mode: int = 0o644) -> int:
    """A new file at ``path`` of mode ``mode`` (whatever the umask), write-only
    and appending: FileExistsError if anything (a link included) is there."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, mode)
    os.fchmod(fd, mode)
    return fd


def read_own(path: str, offset: int = 0, limit: int = 1 << 20) -> Optional[bytes]:
    """Up to ``limit`` bytes of ``path`` from ``offset`` (open_own's rules);
    None when there is no such file to trust."""
    fd = open_own(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        return f.read(limit)


def append_own(path: str, text: str) -> bool:
    """Append ``text`` to ``path`` if it is a regular file of this process's
    uid (open_own's rules; a job's log, which the service made): False, and
    nothing written, otherwise."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            return False
        os.write(fd, text.encode())
        return True
    finally:
        os.close(fd)
