"""Machines of a test Slurm cluster, on one host: a network namespace per
node, joined to a bridge on the host by a veth pair, with its own 10.x
address and a ``hosts`` file naming every node (bind-mounted over
/etc/hosts in a mount namespace of the node's processes; nothing is written
under /etc).

    net = NodeNetwork.create(["gn0", "gn1"], hosts_file)  # bridge 10.213.X.1, gn0 .11, ..
    net.addr["gn0"]                            # "10.213.X.11"
    net.run_argv("gn0", [...])                 # argv that runs there, as hostname gn0
    net.cut("gn0"); net.mend("gn0")            # its link down / up again
    net.remove()                               # namespaces, veths, bridge

Names carry the creating process's PID (``gpuhub-slurm-<pid>-<node>``,
``ghs<pid>b``): a later run removes what a killed run left behind, and only
that. Root only (``ip netns``); a process inside is found by ``ip netns pids``. Processes
enter by ``nsenter --net``, not ``ip netns exec``: that one remounts /sys,
and slurmd wants the host's /sys/fs/cgroup.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess

PREFIX = "gpuhub-slurm-"
LINK_PREFIX = "ghs"
SUBNET = "10.213"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise OSError(f"`ip {' '.join(args)}` failed: {out.stderr.strip()}")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_list() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines()
            if line.strip()]


def remove_stale() -> None:
    """What runs whose process is gone left: their namespaces and links."""
    stale = set()
    for ns in _netns_list():
        m = re.fullmatch(rf"{PREFIX}(\d+)-.+", ns)
        if m and not _alive(int(m.group(1))):
            stale.add(m.group(1))
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(rf"\d+: {LINK_PREFIX}(\d+)[bv]", line)
        if m and not _alive(int(m.group(1))):
            stale.add(m.group(1))
    for pid in stale:
        NodeNetwork(int(pid), "", []).remove()


def _free_subnet() -> str:
    used = set(re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.",
                          _ip("-o", "addr", "show", check=False).stdout))
    for third in range(1, 255):
        if str(third) not in used:
            return f"{SUBNET}.{third}"
    raise OSError(f"no free {SUBNET}.X.0/24 for the test nodes")


class NodeNetwork:
    def __init__(self, owner: int, subnet: str, nodes: list[str], hosts_file: str = ""):
        self.owner = owner
        self.hosts_file = hosts_file
        self.subnet = subnet
        self.nodes = list(nodes)
        self.bridge = f"{LINK_PREFIX}{owner}b"
        self.host_addr = f"{subnet}.1"
        self.addr = {n: f"{subnet}.{11 + i}" for i, n in enumerate(nodes)}

    def netns(self, node: str) -> str:
        return f"{PREFIX}{self.owner}-{node}"

    def veth(self, node: str) -> str:
        return f"{LINK_PREFIX}{self.owner}v{self.nodes.index(node)}"

    @classmethod
    def create(cls, nodes: list[str], hosts_file: str) -> "NodeNetwork":
        remove_stale()
        net = cls(os.getpid(), _free_subnet(), nodes, hosts_file)
        try:
            net._create()
        except BaseException:
            net.remove()
            raise
        return net

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host_addr}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in self.addr.items()))
        for node in self.nodes:
            ns, veth = self.netns(node), self.veth(node)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{self.addr[node]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def run_argv(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` in the node's namespace with hostname ``node`` (a UTS namespace
        of its own) and the nodes' hosts file as /etc/hosts (a mount namespace);
        each step execs the next, so the PID is the command's."""
        return ["nsenter", f"--net=/var/run/netns/{self.netns(node)}",
                "unshare", "--uts", "--mount", "--propagation", "slave", "sh", "-c",
                'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"',
                node, self.hosts_file, *argv]

    def pids(self, node: str) -> list[int]:
        out = _ip("netns", "pids", self.netns(node), check=False).stdout
        return [int(p) for p in out.split() if p.isdigit()]

    def kill_all(self, node: str) -> list[int]:
        """SIGKILL every process of the node, as a machine losing power."""
        pids = self.pids(node)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def cut(self, node: str) -> None:
        _ip("-n", self.netns(node), "link", "set", "eth0", "down")

    def mend(self, node: str) -> None:
        _ip("-n", self.netns(node), "link", "set", "eth0", "up")

    def remove(self) -> None:
        """Everything this network made; what is already gone is fine."""
        for ns in _netns_list():
            if ns.startswith(f"{PREFIX}{self.owner}-"):
                for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                _ip("netns", "del", ns, check=False)
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
            m = re.match(rf"\d+: ({LINK_PREFIX}{self.owner}v\d+)", line)
            if m:
                _ip("link", "del", m.group(1), check=False)
        _ip("link", "del", self.bridge, check=False)
