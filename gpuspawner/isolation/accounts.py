"""Per-user system accounts: every notebook server, job and model replica
of a hub user runs as that user's own account.

- ``account_name``: the naming rule (pure). A hub name that is already a
  valid account name (lower case letters, digits, ``_`` and ``-``, starting
  with a letter or ``_``) keeps it after the prefix: ``alice`` ->
  ``gpuhub-alice``. Any other name is sanitised (lower-cased, other
  characters turned into ``-``, cut to fit 32 characters) and gets ``-`` and
  the first 7 hex digits of the SHA-256 of the exact hub name, so ``Alice``,
  ``alice`` and ``a.lice`` get three different accounts.
- ``ensure_account``: creates the account with ``useradd`` on first use (its
  GECOS field records which hub (its tag, isolation/identity.py) and which
  hub name it belongs to; an existing account that belongs to someone else,
  another hub included, is refused, not adopted) and hands it its
  home, the user's workspace: owned by the account, mode 0700. A workspace
  made before accounts existed (an upgraded data directory) is handed over
  as a whole, once.
- ``drop_privileges``: the preexec step that turns a forked child into the
  account (initgroups, setgid, setuid), composable with other steps
  (``compose``: the cgroup join comes first, then this).

Isolation needs root: ``isolating()`` says whether this process can do it.
"""
from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
from typing import Callable, NamedTuple, Optional, Sequence

DEFAULT_PREFIX = "gpuhub-"
MAX_NAME = 32      # useradd's limit on Debian and most systems
HASH_DIGITS = 7
_VALID = re.compile(r"[a-z_][a-z0-9_-]*\Z")
_PREFIX = re.compile(r"([a-z_][a-z0-9_-]*)?\Z")
MARK = "gpuhub"    # GECOS: "gpuhub <hub tag> <sha256 of the hub name, 16 hex>"

NOT_ISOLATED = ("users are not isolated: this process runs as uid {uid}, not root, so every "
                "notebook server, job and model replica runs as this same account and can "
                "read the others' files and this data directory")


class AccountError(RuntimeError):
    """An account that cannot be created or is not the hub user's."""


def _digest(hub_name: str) -> str:
    import hashlib  # here: the runner imports this module, and every start pays for it
    return hashlib.sha256(hub_name.encode()).hexdigest()


def account_name(hub_name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The system account of hub user ``hub_name`` (see the module's docstring)."""
    if not _PREFIX.match(prefix):
        raise ValueError(f"account prefix {prefix!r}: lower case letters, digits, '_' and '-' "
                         f"only, starting with a letter or '_'")
    if not hub_name:
        raise ValueError("empty hub user name")
    room = MAX_NAME - len(prefix)
    if room < HASH_DIGITS + 2:
        raise ValueError(f"account prefix {prefix!r} leaves no room for a name "
                         f"({MAX_NAME} characters at most)")
    plain = prefix + hub_name
    if _VALID.match(plain) and len(plain) <= MAX_NAME:
        return plain
    clean = re.sub(r"[^a-z0-9_-]", "-", hub_name.lower())
    if not prefix and not re.match(r"[a-z_]", clean):
        clean = "u" + clean  # an account name starts with a letter or "_"
    clean = clean[:room - HASH_DIGITS - 1].rstrip("-") or "u"
    return f"{prefix}{clean}-{_digest(hub_name)[:HASH_DIGITS]}"


def marker(hub_name: str, tag: str = "") -> str:
    """What the account's GECOS field holds: whose it is, on which hub (no
    ``tag``: the mark of a hub from before tags)."""
    return f"{MARK} {tag + ' ' if tag else ''}{_digest(hub_name)[:16]}"


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


class Account(NamedTuple):
    # A NamedTuple, not a dataclass: the runner imports this module, and
    # dataclasses (with inspect) was a fifth of what every start imported.
    name: str
    uid: int
    gid: int
    home: str


def isolating() -> bool:
    """Whether this process can run other users' processes as their accounts."""
    return os.geteuid() == 0


def lookup(name: str) -> Optional[pwd.struct_passwd]:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def ensure_account(hub_name: str, home: str, prefix: str = DEFAULT_PREFIX,
                   shell: str = "/bin/bash", tag: str = "",
                   legacy_prefix: Optional[str] = None) -> Account:
    """The hub user's account, created with useradd if missing, and its home
    (``home``: the workspace) handed to it, mode 0700. ``tag``: this hub's
    (identity.py); an account of this name marked by another hub is
    refused. An account from before tags (``legacy_prefix`` + name, or this
    name) is this hub's when its home is ``home``: it is re-marked."""
    name = account_name(hub_name, prefix)
    mine = marker(hub_name, tag)
    names = [name]
    if legacy_prefix is not None and legacy_prefix != prefix:
        names.append(account_name(hub_name, legacy_prefix))
    ours = next((e.pw_name for e in map(lookup, names)
                 if e is not None and _claim(e, hub_name, tag, home)), name)
    entry = lookup(ours)  # (again: a claimed account was just re-marked)
    if entry is None:
        done = subprocess.run(
            ["useradd", "--user-group", "--no-create-home", "--home-dir", home,
             "--shell", shell, "--comment", mine, name],
            capture_output=True, text=True)
        entry = lookup(name)  # a concurrent spawn may have made it first (exit 9)
        if entry is None:
            raise AccountError(f"cannot create account {name!r} for hub user {hub_name!r}: "
                               f"useradd exited {done.returncode}: {done.stderr.strip()}")
    if entry.pw_gecos != mine:
        raise AccountError(f"account {entry.pw_name!r} exists but is not hub user "
                           f"{hub_name}'s on this hub (its GECOS is {entry.pw_gecos!r}, this "
                           f"hub's would be {mine!r}); refusing to run as it")
    account = Account(entry.pw_name, entry.pw_uid, entry.pw_gid, home)
    hand_over(home, account)
    return account


def _claim(entry: pwd.struct_passwd, hub_name: str, tag: str, home: str) -> bool:
    """Whether ``entry`` is this hub's account of ``hub_name``: marked so,
    or marked by a hub from before tags with ``home`` as its home (an
    upgraded hub's own; another hub's accounts have their homes in its data
    directory), which is then re-marked with ``tag``."""
    mine = marker(hub_name, tag)
    if entry.pw_gecos == mine:
        return True
    if not tag or entry.pw_gecos != marker(hub_name) or not _same_path(entry.pw_dir, home):
        return False
    done = subprocess.run(["usermod", "--comment", mine, entry.pw_name],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise AccountError(f"cannot mark account {entry.pw_name!r} as this hub's: usermod "
                           f"exited {done.returncode}: {done.stderr.strip()}")
    return True


def hand_over(path: str, account: Account, mode: int = 0o700) -> None:
    """Make ``path`` the account's, mode ``mode``: created if missing; if it
    belongs to someone else (a workspace from before accounts), all of it
    is chowned, symlinks themselves and never what they point to."""
    os.makedirs(path, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise AccountError(f"{path} is not a directory")
    if st.st_uid != account.uid:
        for top, dirs, files in os.walk(path, followlinks=False):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), account.uid, account.gid)
    os.lchown(path, account.uid, account.gid)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


def drop_privileges(account: Account, extra_gids: Sequence[int] = ()) -> Callable[[], None]:
    """A preexec step (runs in the forked child) that makes the child the
    account: its groups (plus ``extra_gids``: the device groups of its GPUs),
    then its gid, then its uid; there is no way back. The group list is read
    here, before the fork."""
    groups = sorted(set(os.getgrouplist(account.name, account.gid)) | set(extra_gids))
    uid, gid = account.uid, account.gid

    def drop() -> None:
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError(f"still uid {os.geteuid()} after setuid({uid})")
    return drop


def compose(*steps: Optional[Callable[[], None]]) -> Optional[Callable[[], None]]:
    """One preexec_fn running ``steps`` in order (None entries skipped):
    e.g. compose(join_cgroup, drop_privileges(account))."""
    live = [s for s in steps if s is not None]
    if not live:
        return None

    def preexec() -> None:
        for step in live:
            step()
    return preexec


def telling(step: Optional[Callable[[], None]]) -> Optional[Callable[[], None]]:
    """``step`` (a whole preexec_fn), writing what made it fail to the
    child's stderr (a job's log, the hub's log for a server): the parent
    hears only "Exception occurred in preexec_fn" of any failure there."""
    if step is None:
        return None

    def told() -> None:
        try:
            step()
        except BaseException as e:
            os.write(2, f"gpuspawner: before the command: {type(e).__name__}: {e}\n".encode())
            raise
    return told


def account_env(account: Account) -> dict[str, str]:
    """The login variables of a process run as ``account``."""
    entry = lookup(account.name)
    return {"HOME": account.home, "USER": account.name, "LOGNAME": account.name,
            "SHELL": entry.pw_shell if entry else "/bin/sh"}


def from_passwd(name: str) -> Account:
    """The account ``name`` as /etc/passwd has it (the runner's ``--user``)."""
    entry = lookup(name)
    if entry is None:
        raise AccountError(f"no account {name!r}")
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


class Accounts:
    """The accounts of one hub: the prefix, the hub's tag (identity.py) and
    where each user's home is. ``legacy_prefix``: where the hub's accounts
    from before tags may be (identity.LEGACY_PREFIX with the default
    prefix). ``ensure`` is cheap after the first call for a user (cached
    here; the truth is in /etc/passwd)."""

    def __init__(self, prefix: str, home_for: Callable[[str], str], tag: str = "",
                 legacy_prefix: Optional[str] = None):
        account_name("x", prefix)  # a bad prefix fails at start, not at first spawn
        self.prefix, self.tag, self.legacy_prefix = prefix, tag, legacy_prefix
        self.home_for = home_for
        self._known: dict[str, Account] = {}

    def ensure(self, hub_name: str) -> Account:
        account = self._known.get(hub_name)
        if account is None or lookup(account.name) is None:
            account = ensure_account(hub_name, self.home_for(hub_name), self.prefix,
                                     tag=self.tag, legacy_prefix=self.legacy_prefix)
            self._known[hub_name] = account
        return account


class DirectoryAccounts:
    """The accounts of a cluster whose users come from a directory (LDAP,
    SSSD): nothing is created. A hub user's account is ``user_map[name]``,
    else ``template`` with ``{username}`` (the hub name); it must exist (as
    NSS sees it) and not be root. ``ensure`` hands it the workspace as
    ``Accounts.ensure`` does."""

    def __init__(self, user_map: dict[str, str], template: str,
                 home_for: Callable[[str], str]):
        if "{username}" not in template and not user_map:
            raise ValueError(f"account template {template!r} names no {{username}}: every hub "
                             f"user would share one account")
        self.user_map, self.template, self.home_for = dict(user_map), template, home_for
        self._known: dict[str, Account] = {}

    def name_of(self, hub_name: str) -> str:
        return self.user_map.get(hub_name) or self.template.format(username=hub_name)

    def ensure(self, hub_name: str) -> Account:
        account = self._known.get(hub_name)
        if account is None:
            name = self.name_of(hub_name)
            entry = lookup(name)
            if entry is None:
                raise AccountError(f"no account {name!r} for hub user {hub_name!r} in the "
                                   f"directory (SlurmBackend.user_map / user_template)")
            if entry.pw_uid == 0:
                raise AccountError(f"hub user {hub_name!r} maps to {name!r}, uid 0: refused")
            account = Account(name, entry.pw_uid, entry.pw_gid, self.home_for(hub_name))
            hand_over(account.home, account)
            self._known[hub_name] = account
        return account


def prepare_checkpoint(checkpoint: str, account: Account) -> bool:
    """Get a job's checkpoint directory ready for ``account``. One outside
    the user's workspace (the data directory's default, a replica's) is
    made and handed over here; one inside it is left to the job to make as
    the account (True), so that root never follows a link the user left."""
    home = os.path.realpath(account.home)
    if os.path.commonpath([home, os.path.realpath(checkpoint)]) == home:
        return True
    hand_over(checkpoint, account)
    return False


# ---- the data directory ---------------------------------------------------
# Directories under the data directory whose entries belong to users: others
# may pass through them (to reach their own) but not list them.
PASSAGES = ("workspaces", "workloads", "deployments", "teams")


def secure_data_dir(data_dir: str) -> None:
    """Put the data directory out of users' reach: the directory itself and
    PASSAGES mode 0711 (no listing), every other file in it 0600 and every
    other directory 0700 (databases, initial-users.json, spawner-token,
    cookie secrets, pid files). Also for a data directory from before."""
    os.makedirs(data_dir, exist_ok=True)
    os.chmod(data_dir, 0o711)
    for name in PASSAGES:
        os.makedirs(os.path.join(data_dir, name), exist_ok=True)
    for entry in os.scandir(data_dir):
        if entry.is_symlink():
            continue
        if entry.name in PASSAGES:
            os.chmod(entry.path, 0o711)
        elif entry.is_dir():
            os.chmod(entry.path, 0o700)
        else:
            os.chmod(entry.path, 0o600)


def passages(top: str, path: str) -> None:
    """Mode 0711 for ``top`` and every directory below it on the way to
    ``path`` (``path`` itself excluded): root's, passable by the account
    whose directory ``path`` is, listable by no one else (a team's
    deployment and replica names under ``deployments/<team>/``)."""
    top, path = os.path.abspath(top), os.path.abspath(path)
    d = os.path.dirname(path)
    chain = []
    while os.path.commonpath([top, d]) == top:
        chain.append(d)
        if d == top:
            break
        d = os.path.dirname(d)
    for d in chain:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o711:
            os.chmod(d, 0o711)


def private_file(path: str) -> None:
    """Create ``path`` empty and mode 0600 if missing (a SQLite database made
    in it keeps that mode, and so do its journals)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        os.chmod(path, 0o600)


def unreachable(path: str) -> Optional[str]:
    """The first directory on the way to ``path`` that other accounts cannot
    pass through (no o+x), or None: a user environment (Python, the venv)
    must be reachable by every account."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts) + 1):
        d = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(d)
        except OSError:
            return d
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return d
    return None
