"""Workspaces handed to their users' accounts at the service's start.

An upgrade from a release without per-user accounts (or from one whose
accounts were named otherwise) leaves workspaces that belong to the hub's
account. ``ensure`` hands a workspace over at its user's next submission;
a user who does not come back would keep a workspace that is the hub's,
and, worse, readable by whoever gets that account's uid. So the service
hands every known workspace over when it starts.

Known: every user the database has work of, and, where workspaces live in
the data directory (``{data_dir}/.../{username}``), every folder there. A
template outside it (``/home/{username}``) is never listed: other folders
there are not the hub's to hand out.
"""
from __future__ import annotations

import os
from typing import Callable, Iterable, Optional

from .accounts import AccountError


def listed_users(workspace_root: str, data_dir: str) -> list[str]:
    """The folder names under the workspaces' parent, when it is in the data
    directory and each user's workspace is one folder of it."""
    head, last = os.path.split(workspace_root)
    if last != "{username}" or not workspace_root.startswith("{data_dir}/") \
            or "{username}" in head:
        return []
    parent = head.format(data_dir=data_dir)
    try:
        return sorted(e.name for e in os.scandir(parent)
                      if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def hand_over_all(ensure: Callable[[str], object], users: Iterable[str],
                  home_of: Callable[[str], str], uid_of: Callable[[object], int],
                  log: Callable[[str], None]) -> list[str]:
    """``ensure`` (the accounts' own) for each user whose workspace exists
    and is not its account's yet. Returns the users handed over; a user
    whose account cannot be made is logged and left as it was."""
    done = []
    for user in sorted(set(users)):
        home = home_of(user)
        try:
            owner: Optional[int] = os.lstat(home).st_uid
        except FileNotFoundError:
            continue
        try:
            account = ensure(user)
        except AccountError as e:
            log(f"workspace {home} of {user!r} not handed over: {e}")
            continue
        if owner != uid_of(account):
            done.append(user)
    if done:
        log(f"handed {len(done)} workspace(s) from before this release to their users' "
            f"accounts: {', '.join(done)}")
    return done
