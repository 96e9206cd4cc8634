"""Per-user system accounts (gpuspawner/isolation/accounts.py) and the local
backend running jobs as them.

The naming rules are pure and table-tested. The rest creates real accounts
with useradd (root only, as in CI), under a prefix of this test run's own,
and deletes them afterwards.
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from gpuspawner.backends.base import LaunchSpec
from gpuspawner.backends.local import LocalBackend
from gpuspawner.backends.runner import EXIT_FILE, LOG_FILE
from gpuspawner.isolation.accounts import (MAX_NAME, AccountError, Accounts, DirectoryAccounts,
                                           account_name, compose, drop_privileges,
                                           ensure_account, isolating, secure_data_dir, telling)
import preload
from hub_harness import traversable
from procs import environ_of

VALID = re.compile(r"[a-z_][a-z0-9_-]*\Z")


# ---- naming (pure) ---------------------------------------------------------

@pytest.mark.parametrize("hub_name, prefix, expected", [
    ("alice", "gpuhub-", "gpuhub-alice"),
    ("bob_2", "gpuhub-", "gpuhub-bob_2"),
    ("alice", "jupyter-", "jupyter-alice"),       # TLJH's convention
    ("alice", "", "alice"),
    ("Alice", "gpuhub-", "gpuhub-alice-{h}"),      # upper case: sanitised, so hashed
    ("a.lice", "gpuhub-", "gpuhub-a-lice-{h}"),
    ("alice@example.org", "gpuhub-", "gpuhub-alice-example-org-{h}"),
    ("zoë", "gpuhub-", "gpuhub-zo-{h}"),
    ("7up", "", "u7up-{h}"),                       # must not start with a digit
    ("x" * 25, "gpuhub-", "gpuhub-" + "x" * 25),   # exactly 32: fits as it is
    ("x" * 26, "gpuhub-", "gpuhub-" + "x" * 17 + "-{h}"),  # 33: cut, so hashed
])
def test_account_names(hub_name, prefix, expected):
    h = hashlib.sha256(hub_name.encode()).hexdigest()[:7]
    name = account_name(hub_name, prefix)
    assert name == expected.format(h=h)
    assert VALID.match(name) and len(name) <= MAX_NAME


def test_names_that_sanitise_alike_get_different_accounts():
    names = ["alice", "Alice", "ALICE", "a.lice", "a-lice", "a_lice", "a lice", "alice" + "x" * 40,
             "alice" + "y" * 40, "alice" + "x" * 40 + "z"]
    accounts = [account_name(n) for n in names]
    assert len(set(accounts)) == len(names), dict(zip(names, accounts))
    assert all(VALID.match(a) and len(a) <= MAX_NAME for a in accounts)


@pytest.mark.parametrize("hub_name, prefix, problem", [
    ("alice", "GPU-", "account prefix 'GPU-'"),
    ("alice", "a:b", "account prefix 'a:b'"),
    ("alice", "x" * 25, "leaves no room"),
    ("", "gpuhub-", "empty hub user name"),
])
def test_bad_names_are_refused_by_name(hub_name, prefix, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        account_name(hub_name, prefix)


# ---- real accounts (root) --------------------------------------------------

needs_root = pytest.mark.skipif(not isolating(), reason="creating accounts needs root "
                                                        "(CI runs the tests as root)")


@pytest.fixture
def prefix(account_prefix):
    return account_prefix


@pytest.fixture
def root_dir(tmp_path):
    traversable(str(tmp_path))
    return tmp_path


def as_account(account, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], preexec_fn=compose(drop_privileges(account)),
                          capture_output=True, text=True, timeout=30, cwd="/")


@needs_root
def test_first_use_creates_the_account_and_hands_it_the_workspace(prefix, root_dir):
    home = str(root_dir / "workspaces" / "Alice")
    a = ensure_account("Alice", home, prefix)
    entry = pwd.getpwnam(a.name)
    assert (entry.pw_uid, entry.pw_dir) == (a.uid, home) and a.uid != 0
    st = os.stat(home)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (a.uid, a.gid, 0o700)
    assert ensure_account("Alice", home, prefix) == a  # the second time: the same one
    done = as_account(a, "import os; print(os.getuid(), os.getgid(), os.getgroups())")
    assert done.stdout.split()[:2] == [str(a.uid), str(a.gid)], done.stderr
    assert "0" not in done.stdout.split()[2:], "root's groups must not stay"


@needs_root
def test_an_account_of_someone_else_is_refused_not_adopted(prefix, root_dir):
    name = account_name("carol", prefix)
    subprocess.run(["useradd", "--no-create-home", "--comment", "somebody", name], check=True)
    with pytest.raises(AccountError, match=f"account '{name}' exists but is not hub user"):
        ensure_account("carol", str(root_dir / "carol"), prefix)


@needs_root
def test_a_workspace_from_before_accounts_is_handed_over_links_untouched(prefix, root_dir):
    """An upgraded data directory: root made alice's files. At first use
    they become hers; a symlink is chowned itself, never its target."""
    home = root_dir / "workspaces" / "alice"
    (home / "project" / "data").mkdir(parents=True)
    (home / "project" / "train.py").write_text("print('hi')\n")
    (home / "project" / "data" / "x.csv").write_text("1,2\n")
    target = root_dir / "roots-file"
    target.write_text("root's")
    os.symlink(target, home / "project" / "link")
    a = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user)).ensure("alice")
    for path in [home, home / "project", home / "project" / "train.py",
                 home / "project" / "data" / "x.csv"]:
        assert os.stat(path).st_uid == a.uid, path
    assert os.lstat(home / "project" / "link").st_uid == a.uid
    assert os.stat(target).st_uid == 0
    done = as_account(a, f"open({str(home / 'project' / 'train.py')!r}, 'a').write('# mine')")
    assert done.returncode == 0, done.stderr


@needs_root
def test_the_data_directory_is_out_of_reach_and_workspaces_of_others_too(prefix, root_dir):
    data = root_dir / "data"
    data.mkdir()
    for name in ("gpuhub.sqlite", "jupyterhub.sqlite", "initial-users.json", "spawner-token",
                 "jupyterhub_cookie_secret", "cookie_secret"):
        (data / name).write_text("secret")
        os.chmod(data / name, 0o644)  # as a data directory from before might have them
    accounts = Accounts(prefix, lambda user: str(data / "workspaces" / user))
    secure_data_dir(str(data))
    alice, bob = accounts.ensure("alice"), accounts.ensure("bob")
    (data / "workspaces" / "bob" / "notes.txt").write_text("bob's")
    probe = f"""
import errno, json, os
out = {{}}
def try_(what, f):
    try:
        f(); out[what] = "ok"
    except OSError as e:
        out[what] = errno.errorcode[e.errno]
try_("list data", lambda: os.listdir({str(data)!r}))
for name in ("gpuhub.sqlite", "jupyterhub.sqlite", "initial-users.json", "spawner-token",
             "jupyterhub_cookie_secret", "cookie_secret"):
    try_(name, lambda: open(os.path.join({str(data)!r}, name)).read())
try_("list bob", lambda: os.listdir({str(data / 'workspaces' / 'bob')!r}))
try_("read bob", lambda: open({str(data / 'workspaces' / 'bob' / 'notes.txt')!r}).read())
try_("list workspaces", lambda: os.listdir({str(data / 'workspaces')!r}))
try_("own", lambda: open({str(data / 'workspaces' / 'alice' / 'mine')!r}, "w").write("x"))
print(json.dumps(out))
"""
    done = as_account(alice, probe)
    got = json.loads(done.stdout)
    assert got.pop("own") == "ok"
    assert set(got.values()) == {"EACCES"}, got
    assert bob.uid != alice.uid


# ---- the local backend runs jobs as the account -----------------------------

def wait_exit(backend, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exits = backend.poll()
        if exits:
            return exits[0]
        time.sleep(0.02)
    raise AssertionError("the attempt did not end")


@needs_root
def test_a_job_runs_as_its_account_with_its_own_checkpoint_and_no_service_secrets(
        prefix, root_dir, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "the-service-token")
    monkeypatch.setenv("GPUHUB_DB_URL", "postgresql://gpuhub:secret@db/gpuhub")
    accounts = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user))
    home = root_dir / "workspaces" / "alice"
    code = ("import json, os, sys; "
            "open(os.path.join(os.environ['GPUHUB_CHECKPOINT_DIR'], 'ckpt'), 'w').write('1'); "
            "open(os.path.join(os.environ['GPUHUB_ATTEMPT_DIR'], 'out.ipynb'), 'w').write('{}'); "
            "print(json.dumps({'uid': os.getuid(), 'env': dict(os.environ)}))")
    backend = LocalBackend(accounts=accounts)
    for attempt, checkpoint in [(1, str(home / "ckpts" / "run1")),          # in the workspace
                                (2, str(root_dir / "workloads" / "w1" / "checkpoints"))]:
        attempt_dir = str(root_dir / "workloads" / "w1" / f"attempt-{attempt}")
        backend.start(LaunchSpec("w1", attempt, (sys.executable, "-c", code), attempt_dir,
                                 str(root_dir), user="alice", checkpoint_dir=checkpoint))
        assert wait_exit(backend).returncode == 0, open(os.path.join(attempt_dir, LOG_FILE)).read()
        out = json.loads(open(os.path.join(attempt_dir, LOG_FILE)).read())
        a = accounts.ensure("alice")
        assert out["uid"] == a.uid
        assert os.stat(os.path.join(checkpoint, "ckpt")).st_uid == a.uid
        assert os.stat(os.path.join(attempt_dir, "out.ipynb")).st_uid == a.uid
        assert os.stat(os.path.join(attempt_dir, EXIT_FILE)).st_uid == 0
        env = out["env"]
        assert "JUPYTERHUB_API_TOKEN" not in env and "GPUHUB_DB_URL" not in env
        assert (env["HOME"], env["USER"]) == (str(home), a.name)


@needs_root
def test_a_job_cannot_forge_or_remove_its_runners_records(prefix, root_dir):
    """The attempt directory is writable by the job (sticky): it can leave
    files, but not replace the runner's, nor plant a link the runner would
    write through."""
    accounts = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user))
    victim = root_dir / "victim"
    victim.write_text("untouched")
    code = f"""
import errno, os
d = os.environ['GPUHUB_ATTEMPT_DIR']
os.symlink({str(victim)!r}, os.path.join(d, 'exit.json.tmp'))
for what in ('runner.json', 'output.log'):
    try:
        os.unlink(os.path.join(d, what)); print(what, 'removed')
    except OSError as e:
        print(what, errno.errorcode[e.errno])
"""
    attempt_dir = str(root_dir / "w2" / "attempt-1")
    backend = LocalBackend(accounts=accounts)
    backend.start(LaunchSpec("w2", 1, (sys.executable, "-c", code), attempt_dir, str(root_dir),
                             user="bob"))
    e = wait_exit(backend)
    log = open(os.path.join(attempt_dir, LOG_FILE)).read()
    assert e.returncode == 0, log
    assert "runner.json EPERM" in log and "output.log EPERM" in log
    assert victim.read_text() == "untouched"
    assert json.load(open(os.path.join(attempt_dir, EXIT_FILE)))["returncode"] == 0


def child_of(pid: int) -> int:
    """The one process ``pid`` started (the runner's command)."""
    def find():
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    return int(wait_until(find)[0])


def wait_until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


@needs_root
def test_a_jobs_environment_reaches_its_command_never_the_root_runner(prefix, root_dir):
    """The env a job asks for is the user's choice: with LD_PRELOAD (a real
    library that leaves a marker in each process it is loaded into) it
    loads in the command, as the account, and never in the runner, which
    is root; nor does any of the job's variables reach the runner."""
    library, markers = preload.build(str(root_dir / "preload"))
    accounts = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user))
    backend = LocalBackend(accounts=accounts)
    attempt_dir = root_dir / "w3" / "attempt-1"
    code = ("import os, time\n"
            "while not os.path.exists(os.path.join(os.environ['GPUHUB_ATTEMPT_DIR'], 'go')):\n"
            "    time.sleep(0.02)\n")
    env = {"LD_PRELOAD": library, "MY_SETTING": "the job's", "GPUHUB_TOKEN": "alices-own-token"}
    runner = backend.start(LaunchSpec("w3", 1, (sys.executable, "-c", code), str(attempt_dir),
                                      str(root_dir), env=env, user="alice")).ref
    runner = int(runner)
    command = child_of(runner)
    wait_until(lambda: preload.loaded_by(markers))  # the command's own loader has run
    runner_env, command_env = environ_of(runner), environ_of(command)
    (attempt_dir / "go").touch()
    assert wait_exit(backend).returncode == 0, (attempt_dir / LOG_FILE).read_text()
    assert preload.loaded_by(markers) == {accounts.ensure("alice").uid}
    assert not set(env) & set(runner_env), runner_env
    assert {k: command_env.get(k) for k in env} == env


# What a job plants under the names of records the runner has not written
# (SIGKILLed, it never writes exit.json; without enforcement there is no
# cgroup.json): each form of it.
PLANTS = {
    "fifo": "os.mkfifo(path)",
    "link-to-dev-zero": "os.symlink('/dev/zero', path)",
    "forged": "open(path, 'w').write(json.dumps(forged[name]))",
}


@needs_root
@pytest.mark.parametrize("form", PLANTS)
def test_records_a_job_plants_in_its_attempt_directory_are_not_believed(prefix, root_dir, form):
    """The attempt directory is the job's to write (sticky, 1770). A FIFO
    would hang the service, a link to /dev/zero fill its memory, a forged
    exit.json say the job succeeded, a forged cgroup.json have root remove
    (and kill everything in) a cgroup of the job's choosing: the service
    reads none of them, and reports the attempt, whose runner was killed
    (kill -9, the OOM killer), as lost."""
    victim = root_dir / "victim-cgroup"
    victim.mkdir()
    forged = {"exit.json": {"returncode": 0, "reason": "exited", "finished_at": 1.0},
              "cgroup.json": {"cgroups": [str(victim)], "gids": []}}
    code = f"""
import json, os, time
forged = {forged!r}
for name in forged:
    path = os.path.join(os.environ['GPUHUB_ATTEMPT_DIR'], name)
    {PLANTS[form]}
print('planted', flush=True)
time.sleep(300)
"""
    accounts = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user))
    spec = LaunchSpec("w4", 1, (sys.executable, "-c", code), str(root_dir / "w4" / "attempt-1"),
                      str(root_dir), user="alice")
    backend = LocalBackend(accounts=accounts)
    runner = int(backend.start(spec).ref)
    log = root_dir / "w4" / "attempt-1" / LOG_FILE
    wait_until(lambda: "planted" in log.read_text())
    os.killpg(runner, signal.SIGKILL)

    reports = []

    def report():
        reports.extend([wait_exit(backend), *LocalBackend(accounts=accounts).recover([spec])])
    # A reader stuck on the FIFO would never return: the test ends anyway.
    reader = threading.Thread(target=report, daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive(), f"the service hangs on the planted {form}"
    assert [(e.reason, e.returncode) for e in reports] == [("lost", None), ("lost", None)]
    assert victim.is_dir()


@needs_root
def test_a_link_planted_for_the_log_as_the_directory_is_handed_over_is_never_written(
        prefix, root_dir):
    """Another process of alice's account waits for each attempt directory
    to become hers and at once plants output.log -> a root-only file. The
    log was made before the hand-over: the link cannot take its place, and
    the job's output goes to its own log only."""
    accounts = Accounts(prefix, lambda user: str(root_dir / "workspaces" / user))
    alice = accounts.ensure("alice")
    victim = root_dir / "roots-only"
    victim.write_text("root's\n")
    os.chmod(victim, 0o600)
    jobs = root_dir / "w5"
    jobs.mkdir()
    dirs = [jobs / f"attempt-{i}" for i in range(20)]
    planter = subprocess.Popen([sys.executable, "-c", f"""
import os, sys, time
deadline = time.monotonic() + 60
for d in {[str(d) for d in dirs]!r}:
    while time.monotonic() < deadline:
        try:
            os.symlink({str(victim)!r}, os.path.join(d, 'output.log'))
            print('planted', d, flush=True)
            break
        except FileExistsError:
            break
        except OSError:
            pass  # not hers yet
"""], preexec_fn=drop_privileges(alice), stdout=subprocess.PIPE, text=True, cwd="/")
    backend = LocalBackend(accounts=accounts)
    try:
        for i, d in enumerate(dirs):
            backend.start(LaunchSpec("w5", i, (sys.executable, "-c", "print('job output')"),
                                     str(d), str(root_dir), user="alice"))
            assert wait_exit(backend).returncode == 0
    finally:
        planter.kill()
    assert planter.communicate()[0] == ""
    assert victim.read_text() == "root's\n"
    for d in dirs:
        log = d / LOG_FILE
        assert not log.is_symlink() and log.stat().st_uid == 0
        assert log.read_text() == "job output\n"


# ---- accounts from a directory (Slurm, LDAP) --------------------------------

@needs_root
@pytest.mark.parametrize("hub_name, user_map, template, found", [
    ("alice", {"alice": "nobody"}, "{username}", "nobody"),        # mapped
    ("nobody", {}, "{username}", "nobody"),                        # the hub name itself
    ("carol", {}, "{username}", "no account 'carol' for hub user 'carol'"),
    ("alice", {"alice": "root"}, "{username}", "maps to 'root', uid 0: refused"),
])
def test_directory_accounts_are_looked_up_never_made_and_never_root(root_dir, hub_name,
                                                                     user_map, template, found):
    accounts = DirectoryAccounts(user_map, template, lambda user: str(root_dir / user))
    if found != "nobody":
        with pytest.raises(AccountError, match=re.escape(found)):
            accounts.ensure(hub_name)
        assert not os.path.exists(root_dir / hub_name)
        return
    a = accounts.ensure(hub_name)
    assert (a.name, a.uid) == ("nobody", pwd.getpwnam("nobody").pw_uid)
    st = os.stat(root_dir / hub_name)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (a.uid, 0o700)


def test_a_directory_template_must_name_the_user():
    with pytest.raises(ValueError, match="names no {username}"):
        DirectoryAccounts({}, "shared", str)


def test_what_fails_before_the_command_is_written_to_its_stderr(tmp_path):
    """Popen reduces any failure of a preexec_fn to "Exception occurred in
    preexec_fn": ``telling`` writes the real one where the child's output
    goes (a job's log, the hub's log for a server) first."""
    missing = tmp_path / "no-such-directory"
    err = tmp_path / "stderr"
    with open(err, "wb") as f, pytest.raises(subprocess.SubprocessError):
        subprocess.Popen(["true"], stderr=f,
                         preexec_fn=telling(compose(lambda: os.chdir(missing))))
    assert err.read_text() == ("gpuspawner: before the command: FileNotFoundError: [Errno 2] "
                               f"No such file or directory: '{missing}'\n")
    assert telling(None) is None
