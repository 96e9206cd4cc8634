"""SlurmBackend against a real Slurm (slurmctld + slurmd + munged on this
host, four fake GPUs; see slurm_harness.py)."""
from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from gpuspawner.backends.base import EXITED, LOST, STOPPED, TIME_LIMIT, LaunchSpec
from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.backends.slurm.commands import DATASET_UNREADABLE, SlurmError
from gpuspawner.isolation.accounts import Accounts, isolating
from hub_harness import traversable
from procs import environ_of, uid_of
from slurm_harness import GPUS, NODE, PARTITION, slurm  # noqa: F401  (the fixture)


def make_backend(cluster) -> SlurmBackend:
    return SlurmBackend(slurm_conf=cluster.conf, poll_interval=0, command_timeout=30)


def job_spec(tmp_path, command: str, gpus: int = 1, time_limit=None, grace=30.0,
             attempt: int = 0) -> LaunchSpec:
    wid = "w" + secrets.token_hex(4)
    return LaunchSpec(workload_id=wid, attempt=attempt, argv=("/bin/sh", "-c", command),
                      attempt_dir=str(tmp_path / wid / f"attempt-{attempt}"), cwd=str(tmp_path),
                      env={"GPUHUB_TEAM": "vision"}, time_limit=time_limit, grace_period=grace,
                      checkpoint_dir=str(tmp_path / wid / "checkpoints"),
                      placement=((NODE, tuple(range(gpus))),), pool=PARTITION, team="vision",
                      user="alice", priority="batch", gpus_per_node=gpus)


def wait_exits(backend, n: int = 1, timeout: float = 30.0) -> list:
    exits, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        exits += backend.poll()
        if len(exits) >= n:
            return exits
        time.sleep(0.2)
    raise AssertionError(f"{len(exits)} of {n} attempts ended within {timeout} s: {exits}")


def wait_state(cluster, job_id: str, want: str, timeout: float = 30.0) -> float:
    """Seconds until squeue shows the job in state ``want``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        out = cluster.cmd(["squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"],
                          check=False).stdout.strip()
        if out == want:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not {want} within {timeout} s (last: {out!r})")


def wait_file(path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read()
        time.sleep(0.1)
    raise AssertionError(f"{path} not written within {timeout} s")


def log_of(spec: LaunchSpec) -> str:
    return open(os.path.join(spec.attempt_dir, "output.log")).read()


def test_a_two_gpu_job_runs_on_its_node_and_sees_two_gpus(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, 'echo "node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES '
                           'jobgpus=$SLURM_JOB_GPUS wid=$GPUHUB_WORKLOAD_ID '
                           'ckpt=$GPUHUB_CHECKPOINT_DIR team=$GPUHUB_TEAM"; '
                           'python3 -c "import time; print(\'t=%f\' % time.time())"', gpus=2)
    submitted = time.time()
    job_id = backend.start(s).ref
    exits = wait_exits(backend)
    assert [(x.workload_id, x.reason, x.returncode) for x in exits] == [
        (s.workload_id, EXITED, 0)]
    out = log_of(s)
    fields = dict(kv.split("=", 1) for kv in out.split())
    assert fields["node"] == NODE
    # Slurm bound two of the four GPUs and said so; the hub did not override it.
    assert len(fields["cuda"].split(",")) == 2 and len(fields["jobgpus"].split(",")) == 2
    assert fields["wid"] == s.workload_id and fields["team"] == "vision"
    assert fields["ckpt"] == s.checkpoint_dir
    job = slurm.cmd(["scontrol", "show", "job", "-o", job_id]).stdout
    assert f"NodeList={NODE}" in job and "TresPerNode=gres:gpu:2" in job
    assert f"JobName=gpuhub.{s.workload_id}.0" in job and "Requeue=0" in job
    print(f"\nsubmit -> command running through Slurm: {float(fields['t']) - submitted:.2f} s")


def test_a_job_reads_its_datasets_where_it_runs_and_an_unreadable_one_stops_it(slurm, tmp_path):
    """Slurm mounts nothing: the folder is checked on the node and linked at
    $GPUHUB_DATASETS_DIR/NAME, as jobs find datasets everywhere."""
    backend = make_backend(slurm)
    imagenet = tmp_path / "imagenet"
    imagenet.mkdir()
    (imagenet / "labels.txt").write_text("cat")
    s = replace(job_spec(tmp_path, 'cat "$GPUHUB_DATASETS_DIR/imagenet/labels.txt"', gpus=0),
                datasets=(("imagenet", str(imagenet)),))
    gone = replace(job_spec(tmp_path, "echo should-not-run", gpus=0),
                   datasets=(("wiki", str(tmp_path / "wiki")),))
    backend.start(s)
    backend.start(gone)
    exits = {x.workload_id: x for x in wait_exits(backend, 2)}
    assert (exits[s.workload_id].reason, exits[s.workload_id].returncode) == (EXITED, 0)
    assert log_of(s).strip() == "cat"
    assert exits[gone.workload_id].returncode == DATASET_UNREADABLE
    assert f"dataset wiki: {tmp_path / 'wiki'} cannot be read on node {NODE}" in log_of(gone)
    assert "should-not-run" not in log_of(gone)


def test_a_job_writes_in_its_teams_space_on_the_shared_filesystem(slurm, tmp_path):
    backend = make_backend(slurm)
    backend.team_space_path = str(tmp_path / "teams" / "{team}")
    (tmp_path / "teams" / "vision").mkdir(parents=True)
    s = job_spec(tmp_path, 'echo checkpoint > "$GPUHUB_TEAM_DIR/model.txt"', gpus=0)
    backend.start(s)
    assert [x.returncode for x in wait_exits(backend)] == [0]
    assert (tmp_path / "teams" / "vision" / "model.txt").read_text() == "checkpoint\n"


@pytest.mark.parametrize("command, reason, rc", [
    ("exit 0", EXITED, 0),
    ("exit 3", EXITED, 3),
    ("kill -9 $$", EXITED, -9),       # killed by a signal of its own making
    ("/no/such/command", EXITED, 127),
])
def test_exit_codes_map_to_attempt_exits(slurm, tmp_path, command, reason, rc):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, command)
    backend.start(s)
    (x,) = wait_exits(backend)
    assert (x.workload_id, x.attempt, x.reason, x.returncode) == (s.workload_id, 0, reason, rc)
    assert backend.poll() == []  # reported once


def test_stop_delivers_sigterm_first_so_the_job_checkpoints(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, 'trap \'echo saved > "$GPUHUB_CHECKPOINT_DIR/ckpt"; exit 0\' TERM; '
                           'echo started; while true; do sleep 0.1; done', grace=60)
    job_id = backend.start(s).ref
    wait_state(slurm, job_id, "RUNNING")
    wait_file(os.path.join(s.attempt_dir, "output.log"))
    t0 = time.monotonic()
    backend.stop(s.workload_id, 0, grace=60)
    (x,) = wait_exits(backend)
    assert (x.reason, x.returncode) == (STOPPED, 0)
    assert open(os.path.join(s.checkpoint_dir, "ckpt")).read() == "saved\n"
    assert time.monotonic() - t0 < 20  # it ended on the TERM, long before the 60 s grace


def test_stop_of_a_job_ignoring_sigterm_cancels_it_after_the_grace(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, "trap '' TERM; echo started; while true; do sleep 0.1; done")
    job_id = backend.start(s).ref
    wait_state(slurm, job_id, "RUNNING")
    wait_file(os.path.join(s.attempt_dir, "output.log"))
    t0 = time.monotonic()
    backend.stop(s.workload_id, 0, grace=8)
    # Past the cluster's KillWait (5 s): a plain scancel would have killed it by now.
    time.sleep(6.5)
    assert backend.poll() == []
    assert slurm.cmd(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip() == "RUNNING"
    (x,) = wait_exits(backend, timeout=30)
    took = time.monotonic() - t0
    assert x.reason == STOPPED
    assert 8 <= took < 20  # cancelled at the end of its grace (Slurm then needs a few s)


def test_stop_of_a_job_slurm_still_holds_pending_ends_it_without_the_grace(slurm, tmp_path):
    backend = make_backend(slurm)
    backend.sbatch_args = ["--hold"]  # stays PENDING (JobHeldUser) until released
    s = job_spec(tmp_path, "echo ran")
    job_id = backend.start(s).ref
    wait_state(slurm, job_id, "PENDING")
    assert backend.poll() == []
    backend.stop(s.workload_id, 0, grace=300)
    (x,) = wait_exits(backend, timeout=15)
    assert x.reason == STOPPED
    assert log_of(s) == ""  # it never ran (the backend made the log, empty)


def test_kill_ends_a_job_at_once(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, "trap '' TERM; while true; do sleep 0.1; done")
    job_id = backend.start(s).ref
    wait_state(slurm, job_id, "RUNNING")
    t0 = time.monotonic()
    backend.kill(s.workload_id, 0)
    (x,) = wait_exits(backend)
    assert x.reason == STOPPED and time.monotonic() - t0 < 10


def test_a_job_cancelled_behind_the_hubs_back_is_lost(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, "sleep 300")
    job_id = backend.start(s).ref
    wait_state(slurm, job_id, "RUNNING")
    slurm.cmd(["scancel", job_id])
    (x,) = wait_exits(backend)
    assert x.reason == LOST


def test_recover_after_a_service_restart(slurm, tmp_path):
    old = make_backend(slurm)
    running = job_spec(tmp_path, "echo running; sleep 300")
    ends = job_spec(tmp_path, "exit 4")
    never = job_spec(tmp_path, "true")  # admitted, but the service died before sbatch
    job_id = old.start(running).ref
    old.start(ends)
    wait_state(slurm, job_id, "RUNNING")
    wait_state(slurm, old.job_id(ends.workload_id, 0), "FAILED")
    del old  # the service stops; its jobs go on in Slurm

    new = make_backend(slurm)
    exits = {x.workload_id: x for x in new.recover([running, ends, never])}
    assert {w: (x.reason, x.returncode) for w, x in exits.items()} == {
        ends.workload_id: (EXITED, 4), never.workload_id: (LOST, None)}
    assert new.running() == {(running.workload_id, 0)}
    assert new.job_id(running.workload_id, 0) == job_id
    assert new.poll() == []  # adopted and alive
    new.stop(running.workload_id, 0, grace=5)  # the adopted job obeys the new service
    (x,) = wait_exits(new)
    assert (x.workload_id, x.reason) == (running.workload_id, STOPPED)


def test_a_time_limit_ends_as_time_limit(slurm, tmp_path):
    # Slurm's limits are whole minutes, checked about every 30 s: this takes 60-100 s.
    backend = make_backend(slurm)
    s = job_spec(tmp_path, "echo started; sleep 600", time_limit=5)
    t0 = time.monotonic()
    job_id = backend.start(s).ref
    (x,) = wait_exits(backend, timeout=150)
    assert (x.workload_id, x.reason) == (s.workload_id, TIME_LIMIT)
    took = time.monotonic() - t0
    assert 60 <= took < 150
    assert "TimeLimit=00:01:00" in slurm.cmd(["scontrol", "show", "job", "-o", job_id]).stdout
    print(f"\ntime limit of 5 s (1 min in Slurm) ended the job after {took:.0f} s")


def test_sbatch_refusing_a_job_is_an_error_with_slurms_reason(slurm, tmp_path):
    backend = make_backend(slurm)
    s = job_spec(tmp_path, "true")
    with pytest.raises(SlurmError, match="(?i)invalid partition"):
        backend.start(replace(s, pool="no-such-pool"))
    assert backend.running() == set()


def test_a_job_slurm_runs_off_its_placement_is_cancelled_and_lost(slurm, tmp_path):
    # Slurm 22.05 accepts --nodelist=<a name it does not know> and runs the job
    # anywhere; the backend must notice that the GPUs it uses are not the placed ones.
    backend = make_backend(slurm)
    s = replace(job_spec(tmp_path, "sleep 300"), placement=(("nosuchnode", (0,)),))
    try:
        backend.start(s)
    except SlurmError as e:  # a Slurm that refuses the name is just as good
        assert "node" in str(e).lower()
        return
    (x,) = wait_exits(backend)
    assert x.reason == LOST
    assert slurm.cmd(["squeue", "-h", "-n", f"gpuhub.{s.workload_id}.0"]).stdout == ""


def test_nodes_come_from_slurm_and_a_drained_node_is_drained(slurm):
    backend = make_backend(slurm)
    ((node, gpus),) = backend.discover()
    assert (node.name, node.pool, node.gpus, node.healthy) == (NODE, PARTITION, GPUS, True)
    assert len(gpus) == GPUS and all(g.healthy for g in gpus)
    slurm.cmd(["scontrol", "update", f"nodename={NODE}", "state=drain", "reason=bad fan"])
    try:
        # the running service hears of it at its next node refresh
        backend.node_refresh_interval = 0
        [changed] = backend.take_node_changes()
        assert changed.name == NODE and changed.drained
        ((node, gpus),) = backend.discover()
        assert node.healthy and node.drained and node.placeable_gpus() == ()
        assert "DRAIN" in gpus[0].health_reason and "bad fan" in gpus[0].health_reason
    finally:
        slurm.cmd(["scontrol", "update", f"nodename={NODE}", "state=resume"])
        slurm.wait_idle(30)  # a resumed node is NOT_RESPONDING until slurmd answers a ping
    backend.pool_from = "gres-type"
    ((node, _),) = backend.discover()
    assert node.pool == "gpu" and node.healthy  # untyped gres: pool "gpu"


PROBE = r'''
import errno, json, os, signal, sys, time
t = json.load(open(sys.argv[1]))
out = {"uid": os.getuid(), "pid": os.getpid()}
def attempt(what, f):
    try:
        f()
        out[what] = "ok"
    except OSError as e:
        out[what] = errno.errorcode[e.errno]
attempt("read bob's script", lambda: open(t["script"]).read())
attempt("list bob's attempt directory", lambda: os.listdir(t["attempt_dir"]))
attempt("read bob's job's environment", lambda: open(f"/proc/{t['pid']}/environ").read())
attempt("signal bob's job", lambda: os.kill(t["pid"], signal.SIGKILL))
print("RESULT" + json.dumps(out, sort_keys=True), flush=True)
while not os.path.exists(t["go"]):
    time.sleep(0.1)
'''


@pytest.mark.skipif(not isolating(), reason="jobs as users' accounts need root "
                                            "(CI runs the tests as root)")
def test_jobs_run_as_their_users_accounts_out_of_each_others_reach(slurm, tmp_path, monkeypatch):
    """Run as root, the backend submits each job as its user's account
    (sbatch --uid/--gid): alice's job has her uid, cannot read bob's job
    script (it holds his token), his attempt directory or his job's
    environment, nor signal it; its environment holds nothing of the
    service's."""
    service_secrets = {"JUPYTERHUB_API_TOKEN": "the-services-own-hub-token-0123456789",
                       "GPUHUB_SPAWNER_TOKEN": "the-spawner-token-0123456789abcdef"}
    for key, value in service_secrets.items():
        monkeypatch.setenv(key, value)
    traversable(str(tmp_path))
    prefix = f"t{secrets.token_hex(3)}-"
    accounts = Accounts(prefix, lambda user: str(tmp_path / "workspaces" / user))
    backend = SlurmBackend(slurm_conf=slurm.conf, poll_interval=0, command_timeout=30,
                           accounts=accounts)
    try:
        bob = replace(job_spec(tmp_path, "echo $$; exec sleep 300"), user="bob",
                      env={"GPUHUB_TOKEN": "bobs-own-token"})
        backend.start(bob)
        bob_pid = int(wait_file(os.path.join(bob.attempt_dir, "output.log")).split()[0])
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps({"script": os.path.join(bob.attempt_dir, "slurm-job.sh"),
                                       "attempt_dir": bob.attempt_dir, "pid": bob_pid,
                                       "go": str(tmp_path / "go")}))
        alice = replace(job_spec(tmp_path, "", gpus=1), user="alice",
                        argv=(sys.executable, "-c", PROBE, str(targets)))
        backend.start(alice)
        said = wait_file(os.path.join(alice.attempt_dir, "output.log"))
        result = json.loads(said.split("RESULT", 1)[1])
        alice_uid, bob_uid = accounts.ensure("alice").uid, accounts.ensure("bob").uid
        assert result == {"uid": alice_uid, "pid": result["pid"],
                          "read bob's script": "EACCES", "list bob's attempt directory": "EACCES",
                          "read bob's job's environment": "EACCES", "signal bob's job": "EPERM"}
        assert (uid_of(result["pid"]), uid_of(bob_pid)) == (alice_uid, bob_uid)
        env = environ_of(result["pid"])
        assert not set(service_secrets.values()) & set(env.values()), sorted(env)
        assert (env["USER"], env["HOME"]) == (accounts.ensure("alice").name,
                                              str(tmp_path / "workspaces" / "alice"))
        assert "GPUHUB_TOKEN" not in env  # bob's is bob's
        (tmp_path / "go").touch()
        backend.kill(bob.workload_id, bob.attempt)
        exits = {x.workload_id: x for x in wait_exits(backend, 2)}
        assert exits[alice.workload_id].returncode == 0 and exits[bob.workload_id].reason == STOPPED
    finally:
        slurm.cancel_all()
        for entry in pwd.getpwall():
            if entry.pw_name.startswith(prefix):
                subprocess.run(["userdel", "-f", entry.pw_name], capture_output=True)
