"""Team spaces on one host: a folder per team that its members read and write
and nobody else can reach, with membership taking effect at once.

How it holds (each piece checked by tests/test_team_spaces.py as the users):
- ``<data_dir>/teams/`` is root's, mode 0711: passable, not listable.
- ``<data_dir>/teams/<team>/`` is root's with the team's Unix group
  (``group_name``), mode 2770 (setgid: what members make there gets the
  team's group). Its *access* ACL names each member's account (rwx) and
  gives the owning group nothing: entry is by name, so a member removed
  from the team loses the way in on their next open, even from processes
  that were started while they were a member and still hold the group.
- Its *default* ACL (inherited by what is made inside) gives the team's
  group rwx and others nothing, whatever the maker's umask: teammates
  read and change each other's files through the group.
- Members are the group's members in /etc/group (``gpasswd -M``), so every
  process started for them afterwards (``initgroups``) holds the group.
  A member added while their notebook server runs gets the way in at once
  but reads teammates' files only from processes started after (a
  process's groups are fixed when it starts): restarting the server does it.
- What a removed member has open already stays open (the kernel checks a
  file's permissions when it is opened, not at each read).

ACLs are written as the kernel's ``system.posix_acl_*`` extended attributes
(no setfacl needed); ext4, XFS and btrfs have them on by default.
"""
from __future__ import annotations

import errno
import grp
import os
import re
import stat
import struct
import subprocess
from dataclasses import dataclass
from typing import Iterable, Optional

from .accounts import Account, account_name

# The kernel's ACL xattr format (linux/posix_acl_xattr.h): a version, then
# (tag, permissions, id) entries sorted by tag, then id.
ACL_VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
RWX, NONE = 7, 0
ACCESS_ACL, DEFAULT_ACL = "system.posix_acl_access", "system.posix_acl_default"
SPACES = "teams"          # under the data directory
SPACE_MODE = 0o2770
HOME_LINKS = "teams"      # ~/teams/<team> in each member's home
HOME_LINK = "team"        # ~/team: the one team's space, or ~/teams for members of several


def group_prefix(tag: str) -> str:
    """What a team's group name starts with. Accounts are ``gpuhub-<tag>-<user>``
    (identity.account_prefix): the ``_`` after the tag keeps the two apart, so
    no user's own group (useradd --user-group) can be a team's."""
    return f"gpuhub-{tag}_t-" if tag else "gpuhub_t-"


def group_name(team: str, tag: str) -> str:
    """The Unix group of ``team`` on the hub tagged ``tag`` (32 characters at
    most; a name that does not fit or is not a valid group name is cut and
    gets a digest of the exact team name, as account names do)."""
    return account_name(team, group_prefix(tag))


def encode_acl(entries: Iterable[tuple[int, int, int]]) -> bytes:
    """(tag, permissions, id) entries as the ``system.posix_acl_*`` value."""
    ordered = sorted(entries, key=lambda e: (e[0], e[2] if e[0] in (USER, GROUP) else 0))
    return struct.pack("<I", ACL_VERSION) + b"".join(struct.pack("<HHI", t, p, i)
                                                     for t, p, i in ordered)


def decode_acl(value: bytes) -> list[tuple[int, int, int]]:
    version, = struct.unpack_from("<I", value)
    if version != ACL_VERSION or (len(value) - 4) % 8:
        raise ValueError(f"not a POSIX ACL (version {version}, {len(value)} bytes)")
    return [struct.unpack_from("<HHI", value, offset) for offset in range(4, len(value), 8)]


def access_acl(member_uids: Iterable[int]) -> bytes:
    """The space's own ACL: root and each member rwx, the group and others nothing."""
    return encode_acl([(USER_OBJ, RWX, UNDEFINED_ID), (GROUP_OBJ, NONE, UNDEFINED_ID),
                       (MASK, RWX, UNDEFINED_ID), (OTHER, NONE, UNDEFINED_ID)]
                      + [(USER, RWX, uid) for uid in sorted(set(member_uids))])


def default_acl() -> bytes:
    """What is made inside inherits: its maker and the team's group rwx, others nothing."""
    return encode_acl([(USER_OBJ, RWX, UNDEFINED_ID), (GROUP_OBJ, RWX, UNDEFINED_ID),
                       (MASK, RWX, UNDEFINED_ID), (OTHER, NONE, UNDEFINED_ID)])


def members_of(path: str) -> set[int]:
    """The uids a space's ACL lets in."""
    try:
        value = os.getxattr(path, ACCESS_ACL)
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP):
            return set()
        raise
    return {i for t, _, i in decode_acl(value) if t == USER}


class SpaceError(RuntimeError):
    """A team space that cannot be made or kept (no groupadd, no ACLs)."""


@dataclass(frozen=True)
class Space:
    team: str
    path: str
    group: str
    gid: int


class TeamSpaces:
    """The team spaces of one hub: ``root`` (``<data_dir>/teams``) and the tag
    its groups carry. Every call is idempotent: ``sync`` makes the space if
    missing and sets its members to exactly those given."""

    def __init__(self, root: str, tag: str):
        self.root, self.tag = os.path.abspath(root), tag

    def path(self, team: str) -> str:
        # A team name may hold any character the hub allows: one that is not a
        # plain folder name gets its group's name instead.
        plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", team) and ".." not in team
        return os.path.join(self.root, team if plain else group_name(team, self.tag))

    def ensure(self, team: str) -> Space:
        name = group_name(team, self.tag)
        gid = _ensure_group(name)
        os.makedirs(self.root, exist_ok=True)
        os.chmod(self.root, 0o711)
        path = self.path(team)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise SpaceError(f"{path} is not a directory")
        if (st.st_uid, st.st_gid) != (0, gid):
            os.chown(path, 0, gid)
        os.chmod(path, SPACE_MODE)
        try:
            os.setxattr(path, DEFAULT_ACL, default_acl())
        except OSError as e:
            raise SpaceError(f"cannot set the ACL of {path}: {e.strerror} (team spaces need a "
                             f"filesystem with POSIX ACLs: ext4, XFS, btrfs)") from e
        return Space(team, path, name, gid)

    def sync(self, team: str, members: list[Account]) -> Space:
        """The space of ``team`` with exactly ``members`` in it: its ACL (the
        way in, at once) and its group's members (what new processes hold)."""
        space = self.ensure(team)
        os.setxattr(space.path, ACCESS_ACL, access_acl(a.uid for a in members))
        _set_group_members(space.group, sorted(a.name for a in members))
        return space

    def link_homes(self, teams: Iterable[str], account: Account) -> None:
        """``~/teams/<team>`` for each of the account's ``teams`` and ``~/team``:
        the one team's space, or ``~/teams``."""
        teams = sorted(teams)
        home = os.open(account.home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            links = _own_dir(home, HOME_LINKS, account)
            try:
                wanted = {t: self.path(t) for t in teams}
                _replace_links(links, wanted, account)
            finally:
                os.close(links)
            target = self.path(teams[0]) if len(teams) == 1 else HOME_LINKS
            _link(home, HOME_LINK, target if teams else None, account)
        finally:
            os.close(home)


def _ensure_group(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        pass
    done = subprocess.run(["groupadd", name], capture_output=True, text=True)
    if done.returncode not in (0, 9):  # 9: made meanwhile by another process
        raise SpaceError(f"cannot make group {name}: groupadd exited {done.returncode}: "
                         f"{done.stderr.strip()}")
    return grp.getgrnam(name).gr_gid


def _set_group_members(group: str, names: list[str]) -> None:
    if sorted(grp.getgrnam(group).gr_mem) == names:
        return
    done = subprocess.run(["gpasswd", "-M", ",".join(names), group], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SpaceError(f"cannot set the members of group {group}: gpasswd exited "
                         f"{done.returncode}: {done.stderr.strip()}")


def _own_dir(parent: int, name: str, account: Account) -> int:
    """``name`` in ``parent`` as a directory of the account's (made if
    missing), opened without following a link the user may have put there."""
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
        os.chown(name, account.uid, account.gid, dir_fd=parent, follow_symlinks=False)
    except FileExistsError:
        pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _replace_links(folder: int, wanted: dict[str, str], account: Account) -> None:
    for name in os.listdir(folder):
        if name not in wanted and _is_link(folder, name):
            os.unlink(name, dir_fd=folder)  # a team the account left
    for name, target in wanted.items():
        _link(folder, name, target, account)


def _link(folder: int, name: str, target: Optional[str], account: Account) -> None:
    """The link ``name`` -> ``target`` in ``folder`` (None: none); anything
    else the user made under that name is theirs and left alone."""
    if _is_link(folder, name):
        if target is not None and os.readlink(name, dir_fd=folder) == target:
            return
        os.unlink(name, dir_fd=folder)
    elif _exists(folder, name):
        return
    if target is not None:
        os.symlink(target, name, dir_fd=folder)
        os.chown(name, account.uid, account.gid, dir_fd=folder, follow_symlinks=False)


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
