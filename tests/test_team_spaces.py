"""Team spaces (gpuspawner/isolation/team_spaces.py), tried as the users:
real accounts (useradd, root only as in CI), a real ext4 ACL, processes that
have dropped to each account. The naming and the ACL encoding are pure and
table-tested."""
from __future__ import annotations

import errno
import grp
import os
import secrets
import subprocess
import sys
import time

import pytest

from gpuspawner.isolation.accounts import Accounts, compose, drop_privileges, isolating
from gpuspawner.isolation.team_spaces import (GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ,
                                              UNDEFINED_ID, TeamSpaces, access_acl, decode_acl,
                                              encode_acl, group_name, group_prefix, members_of)
from gpuspawner.isolation.space_usage import FULL, OK, WARN, measure, refusal
from gpuspawner.isolation.space_usage import state as space_state
from hub_harness import traversable

needs_root = pytest.mark.skipif(not isolating(), reason="accounts and groups need root "
                                                        "(CI runs the tests as root)")


# ---- pure --------------------------------------------------------------------

@pytest.mark.parametrize("team, tag, expected", [
    ("vision", "ab12cd", "gpuhub-ab12cd_t-vision"),
    ("nlp", "", "gpuhub_t-nlp"),
    ("Vision Lab", "ab12cd", None),          # sanitised, with a digest
    ("a-very-long-team-name-for-a-group", "ab12cd", None),
])
def test_a_teams_group_is_named_after_the_hub_and_the_team(team, tag, expected):
    name = group_name(team, tag)
    assert len(name) <= 32 and name.startswith(group_prefix(tag))
    if expected:
        assert name == expected
    else:  # the digest of the exact name tells apart names that sanitise or cut alike
        assert name != group_name(team.lower() + "x", tag)


def test_no_users_own_group_can_be_a_teams_group():
    # useradd --user-group names a user's group after the account, gpuhub-<tag>-<user>
    assert not group_name("vision", "ab12cd").startswith("gpuhub-ab12cd-")


@pytest.mark.parametrize("entries", [
    [(USER_OBJ, 7, UNDEFINED_ID), (GROUP_OBJ, 0, UNDEFINED_ID), (OTHER, 0, UNDEFINED_ID)],
    [(USER_OBJ, 7, UNDEFINED_ID), (USER, 7, 1001), (USER, 5, 1000), (GROUP_OBJ, 0, UNDEFINED_ID),
     (GROUP, 7, 2000), (MASK, 7, UNDEFINED_ID), (OTHER, 0, UNDEFINED_ID)],
])
def test_an_acl_encodes_sorted_as_the_kernel_wants_and_decodes_back(entries):
    decoded = decode_acl(encode_acl(reversed(entries)))
    assert sorted(decoded) == sorted(entries)
    tags = [(t, i if t in (USER, GROUP) else 0) for t, _, i in decoded]
    assert tags == sorted(tags)


def test_the_way_in_names_each_member_once_and_gives_the_group_nothing():
    entries = decode_acl(access_acl([1002, 1001, 1002]))
    assert [i for t, _, i in entries if t == USER] == [1001, 1002]
    assert (GROUP_OBJ, 0, UNDEFINED_ID) in entries and (OTHER, 0, UNDEFINED_ID) in entries


# ---- as the users --------------------------------------------------------------

TRY = r'''
import errno, json, os, sys, time
what, path = sys.argv[1], sys.argv[2]
def attempt(f):
    try:
        return f() or "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
if what == "write":
    print(attempt(lambda: open(path, "w").write(sys.argv[3]) and None))
elif what == "read":
    print(attempt(lambda: open(path).read()))
elif what == "list":
    print(attempt(lambda: ",".join(sorted(os.listdir(path)))))
elif what == "hold-then-read":  # a process that lives on across a change
    print("ready", flush=True)
    sys.stdin.readline()
    print(attempt(lambda: open(path).read()), flush=True)
'''


@pytest.fixture
def spaces(tmp_path, account_prefix):
    traversable(str(tmp_path))
    tag = secrets.token_hex(3)
    accounts = Accounts(account_prefix, lambda name: str(tmp_path / "workspaces" / name))
    yield TeamSpaces(str(tmp_path / "teams"), tag), accounts
    for entry in grp.getgrall():
        if entry.gr_name.startswith(group_prefix(tag)):
            subprocess.run(["groupdel", entry.gr_name], capture_output=True)


def run_as(account, *args, stdin=None):
    return subprocess.run([sys.executable, "-c", TRY, *args], preexec_fn=compose(
        drop_privileges(account)), capture_output=True, text=True, timeout=30, cwd="/",
        input=stdin).stdout.strip()


@needs_root
def test_members_share_files_and_no_one_else_can_list_the_space(spaces):
    team_spaces, accounts = spaces
    alice, bob, carol = (accounts.ensure(n) for n in ("alice", "bob", "carol"))
    space = team_spaces.sync("vision", [alice, bob])
    data = os.path.join(space.path, "data.csv")
    assert run_as(bob, "write", data, "1,2,3") == "ok"
    assert run_as(alice, "read", data) == "1,2,3"
    assert run_as(alice, "write", data, "4,5,6") == "ok"   # the group's, whatever bob's umask
    assert run_as(carol, "list", space.path) == "EACCES"
    assert run_as(carol, "read", data) == "EACCES"
    assert run_as(alice, "list", os.path.dirname(space.path)) == "EACCES"  # teams/ itself


@needs_root
def test_a_removed_member_loses_the_way_in_at_once_even_in_a_running_process(spaces):
    team_spaces, accounts = spaces
    alice, bob = accounts.ensure("alice"), accounts.ensure("bob")
    space = team_spaces.sync("vision", [alice, bob])
    data = os.path.join(space.path, "weights.bin")
    assert run_as(alice, "write", data, "w") == "ok"
    # bob's job, started while he is a member, holds the team's group
    job = subprocess.Popen([sys.executable, "-c", TRY, "hold-then-read", data],
                           preexec_fn=compose(drop_privileges(bob)), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert job.stdout.readline().strip() == "ready"
        removed = time.monotonic()
        team_spaces.sync("vision", [alice])
        job.stdin.write("\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "EACCES"
        assert time.monotonic() - removed < 5
    finally:
        job.kill()
        job.wait()
    assert members_of(space.path) == {alice.uid}
    assert bob.name not in grp.getgrnam(space.group).gr_mem
    assert run_as(alice, "read", data) == "w"             # nothing is lost


@needs_root
def test_each_member_finds_the_space_at_home_and_one_in_two_teams_finds_both(spaces):
    team_spaces, accounts = spaces
    alice, bob = accounts.ensure("alice"), accounts.ensure("bob")
    vision = team_spaces.sync("vision", [alice, bob])
    nlp = team_spaces.sync("nlp", [bob])
    team_spaces.link_homes(["vision"], alice)
    team_spaces.link_homes(["vision", "nlp"], bob)
    assert os.path.realpath(os.path.join(alice.home, "team")) == vision.path
    assert os.path.realpath(os.path.join(bob.home, "teams", "nlp")) == nlp.path
    assert run_as(bob, "write", os.path.join(bob.home, "team", "nlp", "x"), "1") == "ok"
    assert not os.path.lexists(os.path.join(alice.home, "teams", "nlp"))
    assert run_as(alice, "list", nlp.path) == "EACCES"
    # bob leaves nlp: his link goes, and so does the way in
    team_spaces.sync("nlp", [])
    team_spaces.link_homes(["vision"], bob)
    assert os.path.realpath(os.path.join(bob.home, "team")) == vision.path
    assert not os.path.lexists(os.path.join(bob.home, "teams", "nlp"))
    assert run_as(bob, "list", nlp.path) == "EACCES"


@needs_root
def test_a_link_a_user_made_in_place_of_their_teams_folder_is_not_followed(spaces, tmp_path):
    team_spaces, accounts = spaces
    alice = accounts.ensure("alice")
    team_spaces.sync("vision", [alice])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(str(elsewhere), os.path.join(alice.home, "teams"))
    with pytest.raises(OSError) as e:
        team_spaces.link_homes(["vision"], alice)
    assert e.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert os.listdir(elsewhere) == []


# ---- storage counted (isolation/space_usage.py) --------------------------------

@pytest.mark.parametrize("used, quota, expected", [
    (0, None, OK), (10**12, None, OK),          # no quota: never refused
    (89, 100, OK), (90, 100, WARN), (99, 100, WARN), (100, 100, FULL), (150, 100, FULL),
])
def test_a_space_warns_from_90_percent_and_is_full_at_its_quota(used, quota, expected):
    assert space_state(used, quota) == expected


def test_measuring_counts_blocks_once_per_file_and_follows_no_link(tmp_path):
    space = tmp_path / "space"
    (space / "sub").mkdir(parents=True)
    (space / "sub" / "a.bin").write_bytes(b"x" * 100_000)
    os.link(space / "sub" / "a.bin", space / "hard-link.bin")     # the same blocks
    os.symlink("/usr", space / "link-out")                         # not walked
    usage = measure(str(space))
    blocks = os.stat(space / "sub" / "a.bin").st_blocks * 512 + os.stat(space / "sub").st_blocks * 512
    link = os.lstat(space / "link-out").st_blocks * 512
    assert usage.bytes == blocks + link and usage.files == 4


def test_a_refusal_names_the_team_what_it_holds_and_that_nothing_was_deleted():
    message = refusal("vision", 3 * 2**30, 2 * 2**30)
    assert "team vision" in message and "3GiB of its 2GiB" in message
    assert "nothing was deleted" in message
