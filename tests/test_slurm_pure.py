"""The Slurm backend and inventory without Slurm: what is submitted, how
Slurm's answers are read, and which commands run when (recorded argv)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from datetime import datetime

import pytest

from gpuspawner.backends.base import EXITED, LOST, STOPPED, TIME_LIMIT, LaunchSpec
from gpuspawner.backends.slurm import SlurmBackend
from gpuspawner.inventory.slurm import expand_hostlist
from gpuspawner.backends.slurm.commands import (DATASET_UNREADABLE, JOB_FILE, JobInfo, SlurmError, batch_script,
                                                exit_from_state, job_name,
                                                parse_job_name, parse_sacct, parse_scontrol_job,
                                                parse_squeue, returncode_of, run_command,
                                                sbatch_args, time_limit_minutes, gang_rank_script)
from gpuspawner.inventory.slurm import (parse_gres, parse_nodes, parse_topology, pool_of,
                                        to_scheduler, unhealthy_flags)
from gpuspawner.isolation.accounts import Account, DirectoryAccounts, isolating
from gpuspawner.serving.replica import server_settings, write_replica_dir


def spec(tmp_path=None, **kw) -> LaunchSpec:
    base = dict(workload_id="wabc123", attempt=2, argv=("python", "train.py", "--lr", "1e-3"),
                attempt_dir=str(tmp_path or "/data") + "/workloads/wabc123/attempt-2",
                cwd="/home/alice", env={"FOO": "bar baz"}, time_limit=3600.0,
                grace_period=45.0, checkpoint_dir="/data/ckpt/wabc123",
                placement=(("node1", (0, 1)),), pool="a100", team="vision", user="alice",
                priority="batch", gpus_per_node=2)
    base.update(kw)
    return LaunchSpec(**base)


# ---- sbatch arguments -----------------------------------------------------------
def opts(args):
    """{option: value} of --opt=value arguments (flags map to True)."""
    out = {}
    for a in args:
        k, eq, v = a.partition("=")
        out[k] = v if eq else True
    return out


@pytest.mark.parametrize("kw, partitions, expect", [
    # one node, 2 GPUs, partition from the map
    ({}, {"a100": "gpu"},
     {"--job-name": "gpuhub.wabc123.2", "--nodes": "1", "--nodelist": "node1",
      "--gres": "gpu:2", "--partition": "gpu", "--time": "60", "--no-requeue": True,
      "--kill-on-invalid-dep": "yes", "--parsable": True, "--chdir": "/home/alice"}),
    # a pool without a mapping goes to the partition of its own name
    ({}, {}, {"--partition": "a100"}),
    # a gang over two nodes: both named, GPUs per node
    ({"placement": (("n1", (0, 1, 2, 3)), ("n2", (0, 1, 2, 3))), "gpus_per_node": 4}, {},
     {"--nodes": "2", "--nodelist": "n1,n2", "--gres": "gpu:4"}),
    # GPUs per node from the placement when the spec does not say
    ({"gpus_per_node": 0, "placement": (("n1", (5, 6, 7)),)}, {}, {"--gres": "gpu:3"}),
    # time limits are whole minutes, rounded up, at least 1
    ({"time_limit": 61.0}, {}, {"--time": "2"}),
    ({"time_limit": 5.0}, {}, {"--time": "1"}),
])
def test_sbatch_args(kw, partitions, expect):
    got = opts(sbatch_args(spec(**kw), partitions))
    for k, v in expect.items():
        assert got.get(k) == v, (k, got)


@pytest.mark.parametrize("cpus, memory, expect", [
    pytest.param(1.0, 8 << 30, {"--cpus-per-task": "1", "--mem": "8192M"}, id="a job's default"),
    pytest.param(0.5, 2 << 30, {"--cpus-per-task": "1", "--mem": "2048M"},
                 id="half a CPU is one whole core in Slurm"),
    pytest.param(2.5, (1 << 30) + 1, {"--cpus-per-task": "3", "--mem": "1025M"},
                 id="rounded up, never down"),
    pytest.param(None, None, {"--cpus-per-task": None, "--mem": None},
                 id="stored before requests: Slurm's defaults"),
])
def test_a_slurm_job_asks_for_the_cpus_and_memory_of_its_workload_on_each_node(cpus, memory,
                                                                               expect):
    got = opts(sbatch_args(spec(cpus=cpus, memory=memory), {}))
    assert {k: got.get(k) for k in expect} == expect


def test_a_sites_own_sbatch_args_come_after_the_request_and_win():
    args = sbatch_args(spec(cpus=1.0, memory=8 << 30), {}, extra=["--mem=0"])
    assert args.index("--mem=8192M") < args.index("--mem=0")


def test_sbatch_args_without_gpus_or_time_limit_ask_for_neither():
    got = opts(sbatch_args(spec(gpus_per_node=0, placement=(("n1", ()),), time_limit=None), {}))
    assert "--gres" not in got and "--time" not in got and "--signal" not in got


def test_output_goes_to_the_attempt_dir_and_comment_says_whose():
    got = opts(sbatch_args(spec(), {}))
    assert got["--output"] == "/data/workloads/wabc123/attempt-2/output.log"
    assert got["--open-mode"] == "append"
    assert got["--comment"] == "gpuhub=wabc123 team=vision user=alice pool=a100 priority=batch"


def test_sbatch_exports_only_the_kept_names_never_the_services_secrets():
    """sbatch hands a job its own whole environment unless told: the
    service's hub token and database URL must not reach a job."""
    service_env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                   "HOME": "/root", "JUPYTERHUB_API_TOKEN": "service-token",
                   "JPY_API_TOKEN": "service-token", "GPUHUB_DB_URL": "postgresql://x:pw@db/g",
                   "JUPYTERHUB_CLIENT_ID": "service-gpuhub", "AWS_SECRET_ACCESS_KEY": "k"}
    got = opts(sbatch_args(spec(), {}, environ=service_env))
    assert got["--export"] == "HOME,LANG,LC_ALL,PATH"
    script = batch_script(spec(env={"GPUHUB_TOKEN": "alices", "GPUHUB_USER": "alice"}))
    assert "export GPUHUB_TOKEN=alices" in script
    assert "service-token" not in script and "JUPYTERHUB" not in script


def test_a_job_of_an_account_is_submitted_as_it_with_its_own_login_variables():
    """Root submits it with --uid/--gid; the service's HOME and USER are not
    passed on, the account's are set by the script."""
    alice = Account("gpuhub-alice", 1234, 1235, "/data/workspaces/alice")
    service_env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "USER": "root", "LANG": "C.UTF-8"}
    got = opts(sbatch_args(spec(), {}, environ=service_env, account=alice))
    assert (got["--uid"], got["--gid"]) == ("1234", "1235")
    assert got["--export"] == "LANG,PATH"
    script = batch_script(spec(), alice)
    for line in ("export HOME=/data/workspaces/alice", "export USER=gpuhub-alice",
                 "export LOGNAME=gpuhub-alice"):
        assert line in script.splitlines()
    assert "--uid" not in opts(sbatch_args(spec(), {}, environ=service_env))


@pytest.mark.parametrize("time_limit, grace, warn, time, signal", [
    (3600.0, 45.0, False, "60", None),       # Slurm's own TERM at the limit, KillWait later KILL
    (3600.0, 45.0, True, "61", "B:TERM@45"),  # the job's own grace before an extended limit
    (60.0, 0.0, True, "2", "B:TERM@1"),       # a signal needs at least a second
    (100.0, 20.5, True, "3", "B:TERM@21"),
])
def test_time_limit_and_warning_signal(time_limit, grace, warn, time, signal):
    got = opts(sbatch_args(spec(time_limit=time_limit, grace_period=grace), {},
                           warn_before_limit=warn))
    assert got["--time"] == time
    assert got.get("--signal") == signal


def test_extra_args_come_last_so_sites_can_add_account_and_qos():
    args = sbatch_args(spec(), {}, extra=["--account=ml", "--qos=gpuhub"])
    assert args[-2:] == ["--account=ml", "--qos=gpuhub"]


def test_a_spec_without_placement_is_refused():
    with pytest.raises(Exception, match="no placement"):
        sbatch_args(spec(placement=()), {})


@pytest.mark.parametrize("seconds, minutes", [(0.5, 1), (60, 1), (60.1, 2), (86400, 1440)])
def test_time_limit_minutes(seconds, minutes):
    assert time_limit_minutes(seconds) == minutes


@pytest.mark.parametrize("name, parsed", [
    ("gpuhub.wabc123.2", ("wabc123", 2)),
    ("gpuhub.w-x_y.0", ("w-x_y", 0)),
    ("wrap", None), ("gpuhub.wabc.x", None), ("other.wabc.1", None), ("gpuhub..1", None),
])
def test_job_names_round_trip(name, parsed):
    assert parse_job_name(name) == parsed
    if parsed:
        assert job_name(*parsed) == name


# ---- the batch script ---------------------------------------------------------------
def run_script(script: str, tmp_path, env=None) -> dict:
    """Run the script with `env` printed instead of the command; the env it sets."""
    path = tmp_path / "job.sh"
    path.write_text(script.replace("exec python train.py --lr 1e-3", "exec env -0"))
    out = subprocess.run(["/bin/sh", str(path)], capture_output=True,
                         env={"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": "2,3"},
                         **({} if env is None else env))
    return dict(kv.split("=", 1) for kv in out.stdout.decode().split("\0") if "=" in kv)


def test_batch_script_sets_the_environment_and_leaves_slurms_gpus_alone(tmp_path):
    s = spec(tmp_path, checkpoint_dir=str(tmp_path / "ckpt"),
             env={"FOO": "bar baz", "QUOTE": "it's $HOME", "CUDA_VISIBLE_DEVICES": "7"})
    env = run_script(batch_script(s), tmp_path)
    assert env["FOO"] == "bar baz" and env["QUOTE"] == "it's $HOME"
    assert env["GPUHUB_WORKLOAD_ID"] == "wabc123" and env["GPUHUB_ATTEMPT"] == "2"
    assert env["GPUHUB_ATTEMPT_DIR"] == s.attempt_dir
    assert env["GPUHUB_CHECKPOINT_DIR"] == str(tmp_path / "ckpt")
    assert (tmp_path / "ckpt").is_dir()
    # Slurm set it (here: the caller's "2,3"); the spec's own value does not override.
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_batch_script_of_a_job_without_gpus_hides_all_gpus(tmp_path):
    s = spec(tmp_path, gpus_per_node=0, placement=(("n1", ()),), checkpoint_dir=None)
    env = run_script(batch_script(s), tmp_path)
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_batch_script_links_each_dataset_it_can_read_where_the_job_runs(tmp_path):
    imagenet = tmp_path / "data" / "imagenet net"
    imagenet.mkdir(parents=True)
    (imagenet / "labels.txt").write_text("cat\n")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    s = spec(tmp_path, attempt_dir=str(attempt), checkpoint_dir=None,
             datasets=(("imagenet", str(imagenet)),))
    env = run_script(batch_script(s), tmp_path)
    assert env["GPUHUB_DATASETS_DIR"] == str(attempt / "datasets")
    assert (attempt / "datasets" / "imagenet" / "labels.txt").read_text() == "cat\n"


@pytest.mark.parametrize("make", ["missing", "a file", "unreadable"])
def test_batch_script_of_an_unreadable_dataset_stops_before_the_command(tmp_path, make):
    if make == "unreadable" and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        pytest.skip("a folder its owner only may read needs another account to try: run as "
                    "root with setpriv (util-linux)")
    base = tmp_path / "shared"  # as a shared filesystem is: others may pass through
    base.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    folder = base / "wiki"
    if make == "a file":
        folder.write_text("not a folder")
    elif make == "unreadable":
        folder.mkdir(mode=0o700)  # its owner's only
    attempt = base / "attempt"
    attempt.mkdir(mode=0o777)
    s = spec(tmp_path, attempt_dir=str(attempt), checkpoint_dir=None,
             datasets=(("wiki", str(folder)),))
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] \
        if os.geteuid() == 0 else []
    out = subprocess.run([*as_nobody, "/bin/sh", "-s"], input=batch_script(s),
                         capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert out.returncode == DATASET_UNREADABLE, out
    assert f"dataset wiki: {folder} cannot be read on node" in out.stderr
    assert not (attempt / "datasets" / "wiki").exists()


@pytest.mark.parametrize("exists, warned", [(True, False), (False, True)])
def test_batch_script_gives_the_team_space_and_says_when_it_cannot_be_written(
        tmp_path, exists, warned):
    team_dir = tmp_path / "teams" / "vision"
    if exists:
        team_dir.mkdir(parents=True)
    script = batch_script(spec(tmp_path, checkpoint_dir=None), team_dir=str(team_dir))
    out = subprocess.run(["/bin/sh", "-s"], input=script.replace(
        "exec python train.py --lr 1e-3", 'echo "team=$GPUHUB_TEAM_DIR"'),
        capture_output=True, text=True, env={"PATH": os.environ["PATH"],
                                             "SLURMD_NODENAME": "gpu07"})
    assert (out.returncode, out.stdout) == (0, f"team={team_dir}\n")  # the job runs on
    assert ("team space " + str(team_dir) + " cannot be written on node gpu07" in out.stderr) \
        == warned


def test_batch_script_execs_the_command_with_its_arguments_quoted():
    script = batch_script(spec(argv=("sh", "-c", "echo 'a b'; exit 3")))
    assert script.startswith("#!/bin/sh\n")
    assert script.rstrip().endswith("exec sh -c " + shlex.quote("echo 'a b'; exit 3"))


# ---- reading Slurm ------------------------------------------------------------------
@pytest.mark.parametrize("hostlist, names", [
    ("localhost", ["localhost"]), ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
    ("gpu[01-02,07],cpu1", ["gpu01", "gpu02", "gpu07", "cpu1"]),
    ("n[8-10]", ["n8", "n9", "n10"]), ("rack1-n[1-2]-ib", ["rack1-n1-ib", "rack1-n2-ib"]),
    ("", []),
])
def test_expand_hostlist(hostlist, names):
    assert expand_hostlist(hostlist) == names


def test_a_job_slurm_runs_off_its_placement_is_cancelled_and_lost(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|RUNNING|None|node2\n"
    assert backend.poll() == []
    assert slurm.of("scancel") == [["scancel", "--signal=KILL", "--full", "101"],
                                   ["scancel", "101"]]
    slurm.queue = "101|gpuhub.wabc123.2|CANCELLED|None|node2\n"
    (x,) = backend.poll()
    assert x.reason == LOST


def test_a_node_list_that_cannot_be_read_cancels_nothing(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|RUNNING|None|node[x-y]\n"
    assert backend.poll() == [] and slurm.of("scancel") == []


def test_parse_squeue():
    text = ("17|gpuhub.wabc.0|RUNNING|None|gpu[01-02]|gpuhub-alice\n"
            "18|gpuhub.wdef.1|PENDING|Resources|\n"
            "19|wrap|COMPLETED|None\n20|gpuhub.wx.0|CANCELLED|None\n\n")
    jobs = parse_squeue(text)
    assert [(j.job_id, j.name, j.state, j.alive) for j in jobs] == [
        ("17", "gpuhub.wabc.0", "RUNNING", True), ("18", "gpuhub.wdef.1", "PENDING", True),
        ("19", "wrap", "COMPLETED", False), ("20", "gpuhub.wx.0", "CANCELLED", False)]
    assert jobs[1].reason == "Resources" and jobs[0].nodes == "gpu[01-02]"
    assert (jobs[0].user, jobs[1].user) == ("gpuhub-alice", "")


SCONTROL_JOB = (
    "JobId=7 JobName=gpuhub.wabc.0 UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED "
    "Reason=NonZeroExitCode Dependency=(null) Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=3:0 RunTime=00:00:01 TimeLimit=00:01:00 TimeMin=N/A "
    "SubmitTime=2026-11-30T00:24:52 StartTime=2026-11-30T00:24:54 EndTime=2026-11-30T00:24:55 "
    "Comment=gpuhub=wabc team=vision user=alice NodeList=localhost "
    "WorkDir=/home/alice StdOut=/data/out.log Power= TresPerNode=gres:gpu:2\n")


def test_parse_scontrol_job():
    j = parse_scontrol_job(SCONTROL_JOB)
    assert (j.job_id, j.name, j.state, j.exit_code, j.reason) == (
        "7", "gpuhub.wabc.0", "FAILED", "3:0", "NonZeroExitCode")
    assert j.end_time is not None and not j.alive
    assert parse_scontrol_job("") is None


def test_parse_sacct_keeps_jobs_not_steps():
    text = ("41|gpuhub.wabc.0|CANCELLED by 0|0:15|2026-11-30T01:00:00\n"
            "41.batch|batch|CANCELLED|0:15|2026-11-30T01:00:00\n"
            "42|gpuhub.wdef.0|TIMEOUT|0:0|Unknown\n")
    rows = parse_sacct(text)
    assert [(r.job_id, r.state, r.exit_code) for r in rows] == [
        ("41", "CANCELLED", "0:15"), ("42", "TIMEOUT", "0:0")]
    assert rows[1].end_time is None


@pytest.mark.parametrize("code, rc", [("0:0", 0), ("3:0", 3), ("0:9", -9), ("0:15", -15),
                                      ("", None), (None, None), ("x:y", None)])
def test_returncode_of(code, rc):
    assert returncode_of(code) == rc


@pytest.mark.parametrize("state, code, stopped, reason, rc", [
    ("COMPLETED", "0:0", False, EXITED, 0),
    ("FAILED", "3:0", False, EXITED, 3),
    ("FAILED", "0:11", False, EXITED, -11),     # killed by a signal of its own
    ("FAILED", "0:0", False, EXITED, 1),        # failed without a code saying so
    ("OUT_OF_MEMORY", "0:125", False, EXITED, -125),
    ("TIMEOUT", "0:15", False, TIME_LIMIT, -15),
    ("TIMEOUT", "0:15", True, TIME_LIMIT, -15),  # ran into its limit while being stopped
    ("DEADLINE", "0:0", False, TIME_LIMIT, 0),
    ("CANCELLED", "0:15", True, STOPPED, -15),
    ("CANCELLED", "0:15", False, LOST, -15),     # scancel behind the hub's back
    ("COMPLETED", "0:0", True, STOPPED, 0),      # checkpointed and exited on our SIGTERM
    ("FAILED", "0:9", True, STOPPED, -9),
    ("NODE_FAIL", "0:0", False, LOST, 0),
    ("BOOT_FAIL", "0:0", False, LOST, 0),
    ("PREEMPTED", "0:15", False, STOPPED, -15),
])
def test_exit_from_state(state, code, stopped, reason, rc):
    x = exit_from_state("wabc", 1, JobInfo("7", "gpuhub.wabc.1", state, code, 1000.0),
                        stopped, now=2000.0)
    assert (x.workload_id, x.attempt, x.reason, x.returncode, x.finished_at) == (
        "wabc", 1, reason, rc, 1000.0)


def test_exit_time_falls_back_to_now_without_an_end_time():
    x = exit_from_state("w", 0, JobInfo("7", "n", "COMPLETED", "0:0", None), False, now=5.0)
    assert x.finished_at == 5.0 and x.succeeded


# ---- the command runner -------------------------------------------------------------
def test_run_command_errors_name_the_command_and_its_message():
    with pytest.raises(SlurmError, match=r"`sh -c 'echo nope >&2; exit 2'` failed with exit "
                                         r"code 2: nope"):
        run_command(["sh", "-c", "echo nope >&2; exit 2"], 5)
    with pytest.raises(SlurmError, match="not found"):
        run_command(["no-such-slurm-command"], 5)
    with pytest.raises(SlurmError, match="did not answer within 1 s"):
        run_command(["sleep", "5"], 1)
    assert run_command(["sh", "-c", "echo $SLURM_CONF"], 5, {"SLURM_CONF": "/x"}) == "/x\n"


# ---- the backend against a recorded, scripted Slurm ---------------------------------
class FakeSlurm:
    """Answers commands from a table and records every argv."""

    def __init__(self):
        self.calls: list[list[str]] = []
        self.queue = ""            # squeue output
        self.jobs: dict[str, str] = {}  # scontrol show job output by id
        self.nodes = ""            # scontrol show node
        self.topology = ""         # scontrol show topology
        self.next_id = 100

    def __call__(self, argv, timeout):
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sbatch":
            self.next_id += 1
            return f"{self.next_id}\n"
        if argv[0] == "squeue":
            return self.queue
        if argv[:3] == ["scontrol", "show", "node"]:
            return self.nodes
        if argv[:3] == ["scontrol", "show", "topology"]:
            return self.topology
        if argv[0] == "scontrol":
            if argv[-1] not in self.jobs:
                raise SlurmError("slurm_load_jobs error: Invalid job id specified")
            return self.jobs[argv[-1]]
        if argv[0] == "sacct":
            raise SlurmError("Slurm accounting storage is disabled")
        return ""

    def of(self, cmd):
        return [c for c in self.calls if c[0] == cmd]


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def fake(tmp_path):
    slurm, clock = FakeSlurm(), Clock()
    backend = SlurmBackend(run=slurm, clock=clock, poll_interval=0,
                           partitions={"a100": "gpu"}, sbatch_args=["--account=ml"])
    return backend, slurm, clock, tmp_path


def test_start_submits_the_script_and_remembers_the_job_id(fake):
    backend, slurm, clock, tmp = fake
    s = spec(tmp, checkpoint_dir=str(tmp / "ckpt"))
    assert backend.start(s).ref == "101"
    (argv,) = slurm.of("sbatch")
    assert argv[-1] == os.path.join(s.attempt_dir, "slurm-job.sh")
    assert "--partition=gpu" in argv and "--account=ml" in argv
    assert open(argv[-1]).read().rstrip().endswith("exec python train.py --lr 1e-3")
    assert '"job_id": "101"' in open(os.path.join(s.attempt_dir, JOB_FILE)).read()
    with pytest.raises(Exception, match="already running"):
        backend.start(s)
    with pytest.raises(Exception, match="already used"):
        SlurmBackend(run=slurm).start(s)  # a fresh backend, same attempt dir


def test_sbatch_that_does_not_answer_a_job_id_is_an_error(fake, tmp_path):
    backend, slurm, clock, tmp = fake
    backend._run_fn = lambda argv, timeout: "Submitted batch job 12\n"
    with pytest.raises(SlurmError, match="not a job id"):
        backend.start(spec(tmp))


def test_a_failed_sbatch_cancels_whatever_it_may_have_queued(fake):
    backend, slurm, clock, tmp = fake

    def timing_out(argv, timeout):
        slurm.calls.append(list(argv))
        if argv[0] == "sbatch":
            raise SlurmError("`sbatch ...` did not answer within 30 s")
        return ""
    backend._run_fn = timing_out
    with pytest.raises(SlurmError, match="did not answer"):
        backend.start(spec(tmp))
    assert slurm.of("scancel") == [["scancel", "--me", "--name=gpuhub.wabc123.2"]]
    assert backend.running() == set()


def test_stop_signals_term_then_cancels_hard_after_grace_and_reports_stopped(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|RUNNING|None\n"
    backend.stop("wabc123", 2, grace=30)
    backend.stop("wabc123", 2, grace=60)  # a second stop sends no second SIGTERM
    assert slurm.of("scancel") == [["scancel", "--signal=TERM", "--full", "101"]]
    clock.t += 29
    assert backend.poll() == [] and len(slurm.of("scancel")) == 1
    clock.t += 1
    assert backend.poll() == []
    assert slurm.of("scancel")[1:] == [["scancel", "--signal=KILL", "--full", "101"],
                                       ["scancel", "101"]]
    clock.t += 1
    backend.poll()
    assert len(slurm.of("scancel")) == 3  # escalated once
    slurm.queue = "101|gpuhub.wabc123.2|CANCELLED|None\n"
    slurm.jobs["101"] = SCONTROL_JOB.replace("JobId=7", "JobId=101").replace(
        "JobState=FAILED", "JobState=CANCELLED").replace("ExitCode=3:0", "ExitCode=0:9")
    (x,) = backend.poll()
    assert (x.reason, x.returncode) == (STOPPED, -9)
    assert backend.poll() == [] and backend.running() == set()


def test_stop_of_a_job_still_pending_just_cancels_it(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|PENDING|Resources\n"
    backend.poll()
    backend.stop("wabc123", 2, grace=30)
    # Cancelled if still pending; signalled if it started since the last look.
    assert slurm.of("scancel") == [["scancel", "--state=PENDING", "101"],
                                   ["scancel", "--signal=TERM", "--full", "101"]]


def test_a_job_pending_too_long_is_logged_once_with_slurms_reason(fake, caplog):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|PENDING|ReqNodeNotAvail, UnavailableNodes:node1\n"
    backend.poll()
    clock.t += backend.pending_warning
    with caplog.at_level("WARNING"):
        backend.poll()
        backend.poll()
    warnings = [r.getMessage() for r in caplog.records if "still PENDING" in r.getMessage()]
    assert len(warnings) == 1 and "ReqNodeNotAvail" in warnings[0]


def test_kill_cancels_at_once(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    backend.kill("wabc123", 2)
    assert slurm.of("scancel") == [["scancel", "--signal=KILL", "--full", "101"],
                                   ["scancel", "101"]]
    backend.kill("wnone", 0)  # not ours: nothing
    assert len(slurm.of("scancel")) == 2


def test_poll_reads_the_queue_at_most_every_poll_interval(fake):
    backend, slurm, clock, tmp = fake
    backend.poll_interval = 5
    assert backend.poll() == [] and slurm.of("squeue") == []  # nothing to watch
    backend.start(spec(tmp))
    slurm.queue = "101|gpuhub.wabc123.2|RUNNING|None\n"
    backend.poll()
    backend.poll()
    clock.t += 5
    backend.poll()
    assert len(slurm.of("squeue")) == 2
    assert slurm.of("squeue")[0] == ["squeue", "--me", "--states=all", "--noheader",
                                     "--format=%i|%j|%T|%r|%N|%u"]


def test_a_failing_squeue_skips_a_poll_and_loses_nothing(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    backend._run_fn = lambda argv, timeout: (_ for _ in ()).throw(SlurmError("timed out"))
    assert backend.poll() == [] and backend.running() == {("wabc123", 2)}


def test_a_job_slurm_forgot_without_accounting_is_lost(fake):
    backend, slurm, clock, tmp = fake
    backend.start(spec(tmp))
    slurm.queue = ""  # gone from squeue; scontrol: invalid id; sacct: disabled
    (x,) = backend.poll()
    assert (x.reason, x.returncode) == (LOST, None)


def test_a_job_slurmctld_forgot_is_read_from_accounting(fake):
    backend, slurm, clock, tmp = fake
    s = spec(tmp, workload_id="wold", attempt=0)
    os.makedirs(s.attempt_dir)
    with open(os.path.join(s.attempt_dir, JOB_FILE), "w") as f:
        f.write('{"job_id": "77", "name": "gpuhub.wold.0"}')
    slurm.queue = ""  # gone from squeue and scontrol (MinJobAge passed while the service was down)
    fake_sacct = "77|gpuhub.wold.0|TIMEOUT|0:15|2026-11-30T01:00:00\n77.batch|batch|CANCELLED|0:15|\n"

    def run(argv, timeout):
        if argv[0] == "sacct":
            slurm.calls.append(list(argv))
            return fake_sacct
        return slurm(argv, timeout)
    backend._run_fn = run
    (x,) = backend.recover([s])
    assert (x.reason, x.finished_at) == (TIME_LIMIT, datetime(2026, 11, 30, 1).timestamp())
    assert slurm.of("sacct") == [["sacct", "--parsable2", "--noheader", "--jobs", "77",
                                  "--format=JobID,JobName,State,ExitCode,End"]]


def test_recover_adopts_by_name_and_reports_ended_and_unknown(fake):
    backend, slurm, clock, tmp = fake
    alive = spec(tmp / "a", workload_id="walive", attempt=0)
    ended = spec(tmp / "b", workload_id="wended", attempt=1)
    never = spec(tmp / "c", workload_id="wnever", attempt=0)
    slurm.queue = ("50|gpuhub.walive.0|RUNNING|None\n51|gpuhub.wended.1|COMPLETED|None\n"
                   "52|somebody-elses|RUNNING|None\n")
    slurm.jobs["51"] = SCONTROL_JOB.replace("JobId=7", "JobId=51").replace(
        "JobState=FAILED", "JobState=COMPLETED").replace("ExitCode=3:0", "ExitCode=0:0")
    exits = {x.workload_id: x for x in backend.recover([alive, ended, never])}
    assert set(exits) == {"wended", "wnever"}
    assert exits["wended"].reason == EXITED and exits["wended"].returncode == 0
    assert exits["wnever"].reason == LOST
    assert backend.running() == {("walive", 0)} and backend.job_id("walive", 0) == "50"
    assert slurm.of("sbatch") == []  # recover starts nothing


@pytest.mark.skipif(not isolating(), reason="handing a workspace to an account needs root "
                                            "(CI runs the tests as root)")
def test_recover_adopts_only_a_job_of_the_attempts_own_account(fake):
    """Any user may name a job of theirs gpuhub.<someone's workload>.<n>:
    with accounts, a job is adopted only if it runs as the attempt's account,
    and the queue is read for the accounts of the attempts only."""
    backend, slurm, clock, tmp = fake
    backend.accounts = DirectoryAccounts({"alice": "nobody"}, "{username}",
                                         lambda user: str(tmp / "workspaces" / user))
    alice = spec(tmp / "a", workload_id="walice", attempt=0)
    slurm.queue = ("50|gpuhub.walice.0|RUNNING|None||nobody\n"
                   "52|gpuhub.walice.0|RUNNING|None||daemon\n")  # newer, but someone else's
    assert backend.recover([alice]) == []
    assert backend.job_id("walice", 0) == "50"
    assert slurm.of("squeue")[0][1] == "--user=nobody"


def test_recover_refuses_to_guess_when_slurm_does_not_answer(fake):
    # Declaring every running job lost because slurmctld is briefly down would
    # requeue work that still runs: the service must not start on a guess.
    backend, slurm, clock, tmp = fake
    backend._run_fn = lambda argv, timeout: (_ for _ in ()).throw(
        SlurmError("`squeue ...` did not answer within 30 s"))
    with pytest.raises(SlurmError, match="did not answer"):
        backend.recover([spec(tmp)])


# ---- the inventory -------------------------------------------------------------------
NODES = """\
NodeName=gpu01 Arch=x86_64 CoresPerSocket=16 CPUAlloc=8 CPUTot=64 Gres=gpu:a100:4(S:0-1) NodeAddr=gpu01 Version=22.05.8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)  RealMemory=512000 State=MIXED Partitions=gpu,all CfgTRES=cpu=64,gres/gpu=4
NodeName=gpu02 Arch=x86_64 Gres=gpu:a100:4(S:0-1) NodeAddr=10.1.0.2 NodeHostName=gpu02 State=IDLE+DRAIN Partitions=gpu,all Reason=bad fan [root@2026-11-29T10:00:00]
NodeName=gpu03 Arch=x86_64 Gres=gpu:8,mps:800 State=DOWN*+NOT_RESPONDING Partitions=big Reason=Not responding
NodeName=cpu01 Arch=x86_64 Gres=(null) State=IDLE Partitions=all
NodeName=l4-01 Gres=gpu:l4:2(S:0),gpu:l4:1(S:1) State=IDLE* Partitions=inference
NodeName=mixed Gres=gpu:a100:2,gpu:v100:2 State=ALLOCATED Partitions=gpu
NodeName=orphan Gres=gpu:2 State=IDLE Partitions=(null)
"""


@pytest.mark.parametrize("gres, parsed", [
    ("gpu:4", (4, ())), ("gpu:a100:4(S:0-1)", (4, ("a100",))), ("(null)", (0, ())),
    ("gpu:l4:2(S:0,1),gpu:l4:1(S:1)", (3, ("l4",))), ("gpu:8,mps:800", (8, ())),
    ("gpu:a100:2,gpu:v100:2", (4, ("a100", "v100"))), ("mps:100", (0, ())), ("", (0, ())),
])
def test_parse_gres(gres, parsed):
    assert parse_gres(gres) == parsed


@pytest.mark.parametrize("state, bad", [
    ("IDLE", []), ("MIXED", []), ("ALLOCATED", []), ("IDLE+DRAIN", ["DRAIN"]),
    ("MIXED+DRAIN", ["DRAIN"]), ("DOWN*", ["DOWN", "NOT_RESPONDING"]),
    ("IDLE*", ["NOT_RESPONDING"]), ("FAIL", ["FAIL"]), ("DOWN+INVALID_REG", ["DOWN"]),
    ("IDLE+CLOUD+POWERED_DOWN", []), ("INVAL", ["INVAL"]),
])
def test_unhealthy_flags(state, bad):
    assert unhealthy_flags(state) == bad


def test_parse_nodes_reads_names_gpus_partitions_state_and_reason():
    nodes = {n.name: n for n in parse_nodes(NODES)}
    assert nodes["gpu01"].gpus == 4 and nodes["gpu01"].partitions == ("gpu", "all")
    assert nodes["gpu01"].healthy and nodes["gpu01"].state == "MIXED"
    assert nodes["gpu02"].reason == "bad fan [root@2026-11-29T10:00:00]"
    assert not nodes["gpu02"].healthy and not nodes["gpu03"].healthy
    assert nodes["cpu01"].gpus == 0 and nodes["orphan"].partitions == ()
    # CPUTot and RealMemory (MB): what cons_tres gives jobs, and what the
    # scheduler admits their --cpus-per-task and --mem against (0: not said)
    assert (nodes["gpu01"].cpus, nodes["gpu01"].memory) == (64.0, 512000 << 20)
    assert (nodes["gpu02"].cpus, nodes["gpu02"].memory) == (0.0, 0)
    gpu01 = {n.name: n for n, _ in to_scheduler(parse_nodes(NODES))}["gpu01"]
    assert (gpu01.cpus, gpu01.memory) == (64.0, 512000 << 20)
    # cons_tres allocates whole cores: the scheduler counts requests so in Slurm pools
    assert gpu01.whole_cpus


@pytest.mark.parametrize("pool_from, partitions, pools", [
    ("partition", {}, {"gpu01": "gpu", "gpu02": "gpu", "gpu03": "big", "l4-01": "inference",
                       "mixed": "gpu"}),
    ("partition", {"a100": "gpu", "l4": "inference"},
     {"gpu01": "a100", "gpu02": "a100", "gpu03": "big", "l4-01": "l4", "mixed": "a100"}),
    ("gres-type", {}, {"gpu01": "a100", "gpu02": "a100", "gpu03": "gpu", "l4-01": "l4",
                       "orphan": "gpu"}),
])
def test_nodes_become_scheduler_nodes_in_their_pools(pool_from, partitions, pools):
    found = to_scheduler(parse_nodes(NODES), pool_from, partitions)
    assert {n.name: n.pool for n, _ in found} == pools  # cpu01 (no GPUs) never
    by_name = {n.name: (n, gpus) for n, gpus in found}
    n, gpus = by_name["gpu02"]
    assert (n.gpus, n.healthy, n.drained) == (4, True, True) and n.placeable_gpus() == ()
    assert gpus[0].health_reason == "Slurm: IDLE+DRAIN (bad fan [root@2026-11-29T10:00:00])"
    assert by_name["gpu01"][0].healthy and by_name["gpu01"][0].usable_gpus() == (0, 1, 2, 3)
    assert by_name["l4-01"][0].gpus == 3 and not by_name["l4-01"][0].healthy
    # GPU indices are unique across nodes (the service keys its GPU records by them)
    indices = [g.index for _, gs in found for g in gs]
    assert len(indices) == len(set(indices)) == sum(n.gpus for n, _ in found)


def test_pool_of_rejects_an_unknown_mode():
    (n,) = [n for n in parse_nodes(NODES) if n.name == "gpu01"]
    with pytest.raises(ValueError, match="pool_from"):
        pool_of(n, "rack", {})


TOPOLOGY = """\
SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=gpu01
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[02-03]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu[01-03] Switches=leaf[0-1]
SwitchName=empty Level=0 LinkSpeed=1 Nodes=(null)
"""


@pytest.mark.parametrize("text, switches", [
    (TOPOLOGY, {"gpu01": {"switch": "leaf0", "switch1": "spine"},
                "gpu02": {"switch": "leaf1", "switch1": "spine"},
                "gpu03": {"switch": "leaf1", "switch1": "spine"}}),
    ("", {}),  # no topology plugin: Slurm prints no switches
])
def test_parse_topology_gives_each_node_its_switch_per_level(text, switches):
    assert parse_topology(text) == switches


def test_nodes_have_their_address_and_their_switches_as_topology():
    nodes = {n.name: n for n in parse_nodes(NODES)}
    assert (nodes["gpu01"].addr, nodes["gpu02"].addr, nodes["orphan"].addr) == (
        "gpu01", "10.1.0.2", "")
    found = {n.name: n for n, _ in to_scheduler(parse_nodes(NODES),
                                               switches=parse_topology(TOPOLOGY))}
    assert found["gpu02"].topology == {"switch": "leaf1", "switch1": "spine"}
    assert found["l4-01"].topology == {}


# ---- a gang's script ----------------------------------------------------------------
GANG = dict(placement=(("n2", (0, 1)), ("n1", (0, 1))), gpus_per_node=2)


def test_a_gangs_script_runs_one_srun_task_per_node_with_rank_0s_address(tmp_path):
    script = batch_script(spec(tmp_path, **GANG), addresses={"n1": "10.0.0.1", "n2": "10.0.0.2"})
    srun = script.rstrip().splitlines()[-1]
    assert srun.startswith("exec srun --export=ALL --kill-on-bad-exit=1 --nodes=2 "
                           "--ntasks-per-node=1 /bin/sh -c ")
    assert srun.endswith(" gpuhub-rank python train.py --lr 1e-3")
    # The placement's first node is rank 0 and MASTER_ADDR, whatever Slurm's order.
    (tmp_path / "gang.sh").write_text(script.replace(srun, "exec env -0"))
    out = subprocess.run(["/bin/sh", str(tmp_path / "gang.sh")], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "12345"})
    env = dict(kv.split("=", 1) for kv in out.stdout.split("\0") if "=" in kv)
    assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("10.0.0.2", "2", "22345")
    assert env["GPUHUB_NODE_ADDRS"] == "10.0.0.2,10.0.0.1"


@pytest.mark.parametrize("node, rank, addr", [("n2", "0", "10.0.0.2"), ("n1", "1", "10.0.0.1")])
def test_each_rank_knows_its_place_in_the_placement(node, rank, addr):
    rank_script = gang_rank_script(spec(**GANG), {"n1": "10.0.0.1", "n2": "10.0.0.2"})
    out = subprocess.run(["/bin/sh", "-c", rank_script, "gpuhub-rank", "env"], text=True,
                         capture_output=True, env={"PATH": os.environ["PATH"],
                                                   "SLURMD_NODENAME": node})
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    assert (env["RANK"], env["NODE_RANK"], env["GPUHUB_NODE_RANK"], env["LOCAL_RANK"],
            env["GPUHUB_NODE_ADDR"]) == (rank, rank, rank, "0", addr)


def test_a_rank_on_a_node_off_the_placement_refuses_to_run():
    out = subprocess.run(["/bin/sh", "-c", gang_rank_script(spec(**GANG), {}), "r", "true"],
                         capture_output=True, text=True, env={"SLURMD_NODENAME": "n9"})
    assert out.returncode == 97 and "n9 is not in the placement" in out.stderr


def test_a_replica_binds_its_nodes_address_which_the_router_is_given(fake):
    backend, slurm, clock, tmp_path = fake
    slurm.nodes = "NodeName=node1 NodeAddr=10.1.0.7 Gres=gpu:4 State=IDLE Partitions=gpu\n"
    slurm.topology = "SwitchName=leaf Level=0 LinkSpeed=1 Nodes=node1\n"
    (node, _), = backend.discover()
    assert node.topology == {"switch": "leaf"}
    rdir = tmp_path / "replica"
    write_replica_dir(str(rdir), {"name": "iris"}, server_settings(41000))
    s = spec(tmp_path, cwd=str(rdir), serving={"name": "iris"})
    assert backend.replica_address(s.workload_id, s.attempt, 41000) is None  # not submitted
    backend.start(s)
    assert json.load(open(rdir / "settings.json"))["host"] == "10.1.0.7"
    assert backend.replica_address(s.workload_id, s.attempt, 41000) == "10.1.0.7:41000"
    # The topology is read once: it is slurm.conf's, fixed while slurmctld runs.
    clock.t += 60
    backend.take_node_changes()
    assert len([c for c in slurm.calls if c[:3] == ["scontrol", "show", "topology"]]) == 1


def test_a_lost_job_makes_the_backend_look_at_the_nodes_at_once(fake):
    backend, slurm, clock, tmp_path = fake
    slurm.nodes = "NodeName=node1 Gres=gpu:4 State=IDLE Partitions=gpu\n"
    backend.discover()
    s = spec(tmp_path)
    job = backend.start(s).ref
    slurm.queue = f"{job}|gpuhub.wabc123.2|NODE_FAIL|None|node1|root\n"
    slurm.jobs[job] = f"JobId={job} JobName=gpuhub.wabc123.2 JobState=NODE_FAIL ExitCode=0:0\n"
    slurm.nodes = "NodeName=node1 Gres=gpu:4 State=DOWN* Partitions=gpu Reason=Not responding\n"
    (x,) = backend.poll()
    assert x.reason == LOST
    (node,) = backend.take_node_changes()  # well within node_refresh_interval
    assert not node.healthy
    assert backend.node_reason("node1") == "Slurm: DOWN* (Not responding)"
