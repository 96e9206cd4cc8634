"""Datasets seen read-only at ``/datasets/<name>`` by one attempt's processes
(the local backend): a private mount namespace made in the runner's forked
child, as root, before it drops to the user's account.

In that namespace (``unshare(CLONE_NEWNS)``, every mount made private so
nothing propagates back to the host):
- a small tmpfs is mounted on ``/datasets`` (the host's own ``/datasets``
  is an empty folder of root's, made if missing): the attempt sees its own
  datasets there and nobody else's;
- each dataset's folder is bind-mounted at ``/datasets/<name>``, then
  remounted read-only (also nosuid, nodev): a write there fails with EROFS
  whatever the files' permissions say;
- the tmpfs itself is remounted read-only.

Who may read the files: the bind mount makes the folder reachable whatever
the folders above it allow (a dataset in its lead's 0700 workspace), and
then each file is opened as its own permissions allow the user: files other
accounts may read (a umask of 022 makes them 0644) are readable by every
reader of the dataset. A file kept private (0600) stays private: the mount
never widens a file's own permissions.

A folder that is no longer the one registered (a link put in place of the
folder, or of a folder above it, after its registration) is not mounted:
the folder is opened, and bound through that descriptor only if the kernel
says it is the very path that was registered (``check``, before the fork,
gives the clear message; the step in the child checks again).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable, Iterable, Sequence

from gpuspawner.vocab.datasets import MOUNT_ROOT as ROOT
from gpuspawner.vocab.datasets import NAME_RE

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV = 0x1, 0x2, 0x4
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000


class MountError(OSError):
    """A dataset that cannot be mounted: the attempt does not start."""


def parse(values: Iterable[str]) -> list[tuple[str, str]]:
    """``NAME=PATH`` (the runner's ``--dataset``) as (name, path)."""
    out = []
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not NAME_RE.fullmatch(name) or not os.path.isabs(path):
            raise ValueError(f"--dataset {value!r}: expected NAME=/absolute/path")
        out.append((name, path))
    return out


def _opened(path: str) -> int:
    """The folder at ``path`` opened (O_PATH), if it still is that path."""
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise MountError(e.errno, f"dataset folder {path}: {e.strerror}") from e
    if os.readlink(f"/proc/self/fd/{fd}") != path:
        os.close(fd)
        raise MountError(f"dataset folder {path} is no longer that folder (a link was put in "
                         f"its place): not mounted")
    return fd


def check(datasets: Sequence[tuple[str, str]]) -> None:
    """Before the fork: each folder is there and is still the registered path."""
    for _name, path in datasets:
        os.close(_opened(path))


def prepare(datasets: Sequence[tuple[str, str]], who: str, root: str = ROOT) -> None:
    """Before the fork of a job or a server (``who``: what must run as root
    for it): root, each folder still the registered one, the mount point
    made. OSError saying which is not so."""
    if os.geteuid() != 0:
        raise OSError(f"datasets are mounted in a mount namespace of the workload's own, which "
                      f"needs {who} to run as root")
    check(datasets)
    ensure_root(root)


def ensure_root(root: str = ROOT) -> None:
    """The host's mount point: an empty folder of root's."""
    try:
        os.mkdir(root, 0o755)
    except FileExistsError:
        pass


def mount_step(datasets: Sequence[tuple[str, str]], root: str = ROOT) -> Callable[[], None]:
    """A preexec step (runs as root in the forked child, before the drop)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]

    def call(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise MountError(err, f"{what}: {os.strerror(err)}")

    def mount(source, target, fstype, flags, data=None) -> None:
        call(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                        flags, data and data.encode()), f"mount {target}")

    def step() -> None:
        call(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for name, path in datasets:
            target = f"{root}/{name}"
            os.mkdir(target, 0o755)
            fd = _opened(path)
            try:
                mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
            finally:
                os.close(fd)
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return step
