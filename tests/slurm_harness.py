"""A real, throwaway Slurm for the tests: munged + slurmctld + slurmd on this
host, as root, with four fake GPUs; or several nodes (``SlurmCluster.start(
multinode(3))``, the ``slurm_nodes`` fixture), each slurmd in its own network
namespace with its own address and hostname (slurm_network.py), under the
switches of a ``topology.conf``.

Everything lives in one temporary directory: the configs, munge's key and
socket, Slurm's state and spool, the logs, and the fake GPU devices (character
devices ``nvidiaN``, major 195, like the real ones: a count-only ``Gres=`` line
without ``File=`` leaves the node INVALID). The daemons listen on free ports,
run in the foreground as our children, and are stopped by their PIDs.

    with SlurmCluster.start() as cluster:   # or the ``slurm`` pytest fixture
        cluster.env                         # {"SLURM_CONF": ...} for the commands
        cluster.lose_node("gn1")            # multi-node: the machine dies (and back:
        cluster.revive_node("gn1")          # its link up, slurmd started again)

Needs root and Debian's ``slurm-wlm`` + ``munge`` (``make test`` installs
them). ``SlurmUnavailable`` says precisely why a cluster could not start.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

import pytest

from gpuspawner.serving.ports import ports_below_ephemeral
from slurm_network import NodeNetwork

NODE = "localhost"
PARTITION = "gpu"
GPUS = 4
# Marks the daemons' environment, which slurmstepd inherits: cleanup finds
# what our slurmd left behind by this, never by a process name.
MARKER = "GPUHUB_SLURM_HARNESS"


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here; the message says why."""


def _free_port() -> int:
    """Below the ephemeral range: a port the kernel may hand out as the source
    of an outgoing connection could be taken before the daemon binds it."""
    return ports_below_ephemeral(1)


@dataclass(frozen=True)
class Layout:
    """The cluster's machines: ``{node: GPUs}``, in a network namespace each
    (``netns``) or the one node ``localhost`` at 127.0.0.1, and
    ``switches`` ``{leaf switch: [nodes]}`` for topology.conf (under one top
    switch), none for no topology plugin."""
    gpus: dict = field(default_factory=lambda: {NODE: GPUS})
    netns: bool = False
    switches: dict = field(default_factory=dict)


def multinode(count: int = 3, gpus: int = 2) -> Layout:
    """``gn0`` under switch ``leaf0``; ``gn1``.. under ``leaf1``: a two-node
    gang that must stay under one switch has one place, and it is not the
    first two nodes."""
    names = [f"gn{i}" for i in range(count)]
    return Layout({n: gpus for n in names}, netns=True,
                  switches={"leaf0": names[:1], "leaf1": names[1:]})


# Seconds before slurmctld calls a silent node DOWN (and ends its jobs with
# NODE_FAIL): short, so the node-loss test runs in seconds, not minutes.
MULTINODE_SLURMD_TIMEOUT = 10


def slurm_conf(d: str, ctld_port: int, slurmd_port: int, layout: Layout, ctld_addr: str,
               addrs: dict, cpus: int = 16) -> str:
    many = layout.netns
    nodes = "".join(f"NodeName={n} NodeAddr={addrs[n]} CPUs={cpus} RealMemory=262144 "
                    f"Gres=gpu:{g} State=UNKNOWN\n" for n, g in layout.gpus.items())
    return f"""\
ClusterName=gpuhubtest
SlurmctldHost=localhost{f"({ctld_addr})" if many else ""}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.sock
StateSaveLocation={d}/state
# %n: each node's own (they share this directory).
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
# No cgroups: processes are tracked by parentage, and nothing is confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job that names no --mem gets 1 GiB a CPU, not the whole node (which would
# leave every other job pending).
DefMemPerCPU=1024
GresTypes=gpu
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
{"TopologyPlugin=topology/tree" if layout.switches else ""}
# The configured CPUs and memory, not this small machine's: several test jobs at once
# (memory is consumable, CR_Core_Memory, as jobs ask for it with --mem).
SlurmdParameters=config_overrides
ReturnToService=2
# Seconds between a job's SIGTERM and SIGKILL (time limit, scancel): short for tests.
KillWait=5
MinJobAge=600
InactiveLimit=0
MessageTimeout={5 if many else 20}
SlurmctldTimeout=30
SlurmdTimeout={MULTINODE_SLURMD_TIMEOUT if many else 60}
{nodes}PartitionName={PARTITION} Nodes={",".join(layout.gpus)} Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf(d: str, layout: Layout) -> str:
    return "".join(f"NodeName={n} Name=gpu File={d}/dev/{n}/nvidia[0-{g - 1}]\n"
                   for n, g in layout.gpus.items())


def topology_conf(layout: Layout) -> str:
    """Leaf switches of the nodes under one top switch ``top``."""
    lines = [f"SwitchName={leaf} Nodes={','.join(nodes)}\n"
             for leaf, nodes in layout.switches.items()]
    return "".join(lines) + f"SwitchName=top Switches={','.join(layout.switches)}\n"


class SlurmCluster:
    def __init__(self, root: str, layout: Layout):
        self.root = root
        self.layout = layout
        self.conf = os.path.join(root, "slurm.conf")
        self.env = {"SLURM_CONF": self.conf}
        self.procs: dict[str, subprocess.Popen] = {}
        self.net: Optional[NodeNetwork] = None
        self.addr = {n: "127.0.0.1" for n in layout.gpus}  # NodeAddr of each node

    @property
    def nodes(self) -> list[str]:
        return list(self.layout.gpus)

    # ---- start -----------------------------------------------------------
    @classmethod
    def start(cls, layout: Optional[Layout] = None, timeout: float = 90.0) -> "SlurmCluster":
        layout = layout or Layout()
        tools = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo") + (
            ("ip", "nsenter", "unshare") if layout.netns else ())
        missing = [c for c in tools if shutil.which(c) is None]
        if missing:
            raise SlurmUnavailable(f"{', '.join(missing)} not installed (apt-get install -y "
                                   f"slurm-wlm munge iproute2 util-linux; `make test` does it)")
        if os.geteuid() != 0:
            raise SlurmUnavailable("the Slurm test cluster runs its daemons as root; "
                                   f"these tests run as uid {os.geteuid()}")
        cluster = cls(tempfile.mkdtemp(prefix="gpuhub-slurm-"), layout)
        try:
            if cluster.layout.netns:
                try:
                    cluster.net = NodeNetwork.create(cluster.nodes,
                                                     os.path.join(cluster.root, "hosts"))
                except OSError as e:
                    raise SlurmUnavailable(f"cannot make the nodes' network namespaces: {e}"
                                           ) from e
                cluster.addr = dict(cluster.net.addr)
            cluster._write_files()
            cluster._start_munged()
            cluster._start_daemons()
            cluster.wait_idle(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _write_files(self) -> None:
        d = self.root
        os.chmod(d, 0o755)
        for sub in ("munge", "state", "spool", "log", "run"):
            os.makedirs(os.path.join(d, sub), mode=0o755, exist_ok=True)
        os.chmod(os.path.join(d, "munge"), 0o700)
        minor = 0
        for node, gpus in self.layout.gpus.items():
            os.makedirs(os.path.join(d, "spool", node), mode=0o755)
            os.makedirs(os.path.join(d, "dev", node), mode=0o755)
            for i in range(gpus):
                path = os.path.join(d, "dev", node, f"nvidia{i}")
                try:
                    # 195 is the NVIDIA driver's major number; nothing opens these.
                    os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
                except OSError as e:
                    raise SlurmUnavailable(f"cannot make the fake GPU device {path} "
                                           f"(mknod c 195 {minor}): {e}") from e
                minor += 1
        ctld_addr = self.net.host_addr if self.net else "127.0.0.1"
        with open(self.conf, "w") as f:
            f.write(slurm_conf(d, _free_port(), _free_port(), self.layout, ctld_addr, self.addr))
        with open(os.path.join(d, "gres.conf"), "w") as f:
            f.write(gres_conf(d, self.layout))
        if self.layout.switches:
            with open(os.path.join(d, "topology.conf"), "w") as f:
                f.write(topology_conf(self.layout))
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("# Unused: ProctrackType=proctrack/linuxproc, TaskPlugin=task/none\n"
                    "CgroupAutomount=no\n")
        key = os.path.join(d, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.root, "log", f"{name}.out"), "ab")
        try:
            # A session of its own: signals meant for the tests never reach it,
            # and it never shares a group we might signal.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, **self.env, MARKER: self.root},
                                    preexec_fn=_die_with_parent)
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def _start_munged(self) -> None:
        m = os.path.join(self.root, "munge")
        # --force: munged refuses root and shared directories without it.
        self._spawn("munged", ["munged", "--foreground", "--force",
                               f"--socket={m}/munge.sock", f"--key-file={m}/munge.key",
                               f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log",
                               f"--seed-file={m}/munged.seed"])
        self._wait_for(lambda: os.path.exists(f"{m}/munge.sock"), 15, "munged", "its socket")

    def _start_daemons(self) -> None:
        # -i: ignore state a previous run might have left (there is none: fresh dir).
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        for node in self.nodes:
            self._start_slurmd(node)

    def _start_slurmd(self, node: str) -> None:
        argv = ["slurmd", "-D", "-N", node, "-f", self.conf]
        self._spawn(f"slurmd-{node}", self.net.run_argv(node, argv) if self.net else argv)

    def _wait_for(self, ready, timeout: float, who: str, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {p.returncode} while waiting "
                                           f"for {who}: {self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"{who} did not come up ({what}) within {timeout:.0f} s: "
                               f"{self.log_tail(who)}")

    def node_state(self, node: str = NODE) -> str:
        out = self.cmd(["sinfo", "-h", "-N", "-n", node, "-o", "%t"], check=False)
        return out.stdout.strip()

    def node_states(self) -> dict[str, str]:
        out = self.cmd(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        return dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)

    def wait_idle(self, timeout: float, nodes: Optional[list[str]] = None) -> None:
        nodes = nodes or self.nodes
        self._wait_for(lambda: all(self.node_states().get(n) == "idle" for n in nodes), timeout,
                       f"slurmd-{nodes[0]}", f"nodes {','.join(nodes)} idle in sinfo")

    # ---- a node's life (multi-node) ----------------------------------------
    def lose_node(self, node: str) -> list[int]:
        """The machine dies: every process in its namespace (slurmd, the job's
        slurmstepd and tasks) is SIGKILLed and its link goes down, so it
        neither runs nor answers. The PIDs killed."""
        assert self.net is not None, "lose_node needs a multi-node cluster"
        self.net.cut(node)
        pids = self.net.kill_all(node)
        p = self.procs.pop(f"slurmd-{node}", None)
        if p is not None:
            p.wait(10)
        return pids

    def revive_node(self, node: str, timeout: float = 60) -> None:
        """Back: its link up and its slurmd started; waits until Slurm has it idle
        (ReturnToService=2 returns a DOWN node that registers)."""
        assert self.net is not None, "revive_node needs a multi-node cluster"
        self.net.mend(node)
        self._start_slurmd(node)
        self.wait_idle(timeout, [node])

    # ---- use -------------------------------------------------------------
    def cmd(self, argv: list[str], check: bool = True, timeout: float = 30
            ) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, check=check,
                              timeout=timeout, env={**os.environ, **self.env})

    def log_tail(self, name: str, n: int = 2000) -> str:
        text = ""
        for path in (os.path.join(self.root, "log", f"{name}.log"),
                     os.path.join(self.root, "log", f"{name}.out"),
                     os.path.join(self.root, "munge", f"{name}.log")):
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += f.read()[-n:]
        return text.strip() or "(no log)"

    def cancel_all(self, timeout: float = 30) -> None:
        """Cancel every job (of every user: jobs run as users' accounts too)
        and wait until Slurm has none running or completing."""
        ids = self.cmd(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        if ids:
            self.cmd(["scancel", "--full", "--signal=KILL", "--state=RUNNING", *ids],
                     check=False)
            self.cmd(["scancel", *ids], check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.cmd(["squeue", "-h", "-o", "%i"], check=False)
            if out.returncode == 0 and not out.stdout.strip():
                return
            time.sleep(0.3)

    # ---- stop ------------------------------------------------------------
    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.cancel_all()
        slurmds = [name for name in self.procs if name.startswith("slurmd-")]
        for name in (*slurmds, "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is not None:
                _terminate(p)
        # slurmstepd daemonizes out of slurmd: find ours by the marker.
        for pid in _marked_pids(self.root):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.net is not None:
            self.net.remove()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SlurmCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, even
    by SIGKILL, so no daemon outlives a killed test run."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _terminate(p: subprocess.Popen, wait: float = 10) -> None:
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)  # by PID: the daemon only
    try:
        p.wait(wait)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(5)


def _marked_pids(root: str) -> list[int]:
    want = f"{MARKER}={root}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def _cluster(layout: Optional[Layout] = None):
    try:
        cluster = SlurmCluster.start(layout)
    except SlurmUnavailable as e:
        pytest.fail(f"cannot start the Slurm test cluster: {e}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def slurm():
    """A running one-node test cluster for the module; the tests fail with
    the reason when Slurm cannot run here."""
    yield from _cluster()


@pytest.fixture(scope="session")
def slurm_nodes():
    """Three nodes of two GPUs each, in network namespaces, under two
    switches (``multinode()``): one cluster for every multi-node test."""
    yield from _cluster(multinode())
