"""A Slurm cluster's GPU nodes as scheduler nodes, from
``scontrol show node --oneliner`` and ``scontrol show topology``.

One line per node: its name, its address (``NodeAddr``: where its jobs and
replicas are reached), its GPUs (``Gres=gpu:4`` or ``gpu:a100:4(S:0-1)``,
several types joined by commas), its partitions and its state. With
``TopologyPlugin=topology/tree`` each node's switches become its scheduler
topology: ``{"switch": <leaf switch>, "switch1": <the one above>, ...}``, so
a gang asking ``topology_key: switch`` stays under one leaf, as Slurm's own
tree plugin would place it. Nodes with no
GPU GRES are not the hub's business and are left out. A node Slurm will not
run work on (DOWN, FAIL, not responding, INVALID) is unhealthy, with Slurm's
state and reason as the why; a DRAIN node is drained, as GPU Hub drains: no
new work, what runs there runs on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ..scheduler.model import Node
from .model import Gpu

# A node in any of these states takes no new jobs (state flags are joined
# with "+"; a trailing "*" means not responding).
UNHEALTHY_FLAGS = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                             "INVAL", "INVALID", "NOT_RESPONDING", "FUTURE"})

DRAIN_FLAGS = frozenset({"DRAIN", "DRAINED", "DRAINING"})

_GRES_GPU = re.compile(r"^gpu(?::(?P<type>[^:(]+))?:(?P<count>\d+)")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gpus: int
    gpu_types: tuple[str, ...]   # () for untyped GRES
    partitions: tuple[str, ...]
    state: str
    reason: str = ""
    addr: str = ""               # NodeAddr ("" when Slurm did not say)
    # CPUTot and RealMemory (bytes): what cons_tres gives jobs' --cpus-per-task
    # and --mem, and what the scheduler admits requests against (0: not said).
    cpus: float = 0.0
    memory: int = 0

    @property
    def healthy(self) -> bool:
        return not unhealthy_flags(self.state)


def unhealthy_flags(state: str) -> list[str]:
    flags = [f for f in state.upper().split("+") if f]
    out = [f.rstrip("*~#!%$@^-") for f in flags if f.rstrip("*~#!%$@^-") in UNHEALTHY_FLAGS]
    if any(f.endswith("*") for f in flags):
        out.append("NOT_RESPONDING")
    return out


def parse_gres(gres: str) -> tuple[int, tuple[str, ...]]:
    """``(GPU count, GPU types)`` of a ``Gres=`` value: ``gpu:a100:2(S:0),gpu:v100:1,mps:100``
    -> ``(3, ("a100", "v100"))``; ``(null)`` -> ``(0, ())``."""
    count, types = 0, []
    # Commas also appear inside "(S:0,1)": drop the parenthesised parts first.
    for part in re.sub(r"\([^)]*\)", "", gres).split(","):
        m = _GRES_GPU.match(part.strip())
        if m:
            count += int(m.group("count"))
            if m.group("type") and m.group("type") not in types:
                types.append(m.group("type"))
    return count, tuple(types)


def parse_oneliner(line: str) -> dict[str, str]:
    """``Key=value Key=value``; a value may hold spaces (``OS=Linux 6.1 #1 SMP``,
    ``Reason=Not responding [slurm@...]``) and runs until the next `` Key=``."""
    out: dict[str, str] = {}
    key = None
    for token in line.split(" "):
        head, eq, rest = token.partition("=")
        if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", head):
            key = head
            out[key] = rest
        elif key is not None and token:
            out[key] += " " + token
    return out


def parse_nodes(text: str) -> list[SlurmNode]:
    """Every node line of ``scontrol show node --oneliner``, GPU or not."""
    nodes = []
    for line in text.splitlines():
        f = parse_oneliner(line.strip())
        if "NodeName" not in f:
            continue
        gpus, types = parse_gres(f.get("Gres", ""))
        parts = tuple(p for p in f.get("Partitions", "").split(",") if p and p != "(null)")
        nodes.append(SlurmNode(f["NodeName"], gpus, types, parts, f.get("State", "UNKNOWN"),
                               f.get("Reason", "").strip(), f.get("NodeAddr", "").strip(),
                               float(_whole(f.get("CPUTot"))),
                               _whole(f.get("RealMemory")) << 20))
    return nodes


def _whole(value: Optional[str]) -> int:
    """A count scontrol gives (``64``); 0 when it gives none or no number."""
    return int(value) if value and value.strip().isdigit() else 0


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed host list: ``gpu[01-03,07],cpu1`` -> gpu01, gpu02, gpu03, gpu07, cpu1."""
    names = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", hostlist):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{n:0{len(lo)}d}{suffix}")
    return names


def parse_topology(text: str) -> dict[str, dict[str, str]]:
    """``scontrol show topology`` as each node's switches, ``{node: {"switch":
    leaf, "switch1": its parent, ...}}``: the level-0 switch naming the node is
    its leaf; a switch of level L naming it is ``switchL``. ``{}`` without a
    topology plugin (Slurm prints no ``SwitchName`` lines then)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        f = parse_oneliner(line.strip())
        if "SwitchName" not in f or not f.get("Nodes") or f["Nodes"] == "(null)":
            continue
        level = int(f.get("Level", "0") or 0)
        key = "switch" if level == 0 else f"switch{level}"
        for node in expand_hostlist(f["Nodes"]):
            out.setdefault(node, {})[key] = f["SwitchName"]
    return out


def pool_of(node: SlurmNode, pool_from: str, partitions: dict) -> Optional[str]:
    """The node's pool, or None when it has none (no partition; mixed GPU types).

    "partition": ``partitions`` ({pool: partition}) read backwards, else the
    first partition's own name. "gres-type": the GPU type, "gpu" if untyped.
    """
    if pool_from == "gres-type":
        if len(node.gpu_types) > 1:
            return None  # one node, one pool: a node mixing GPU types cannot be one
        return node.gpu_types[0] if node.gpu_types else "gpu"
    if pool_from != "partition":
        raise ValueError(f"pool_from must be 'partition' or 'gres-type', not {pool_from!r}")
    pools = {part: pool for pool, part in partitions.items()}
    for part in node.partitions:
        if part in pools:
            return pools[part]
    return node.partitions[0] if node.partitions else None


def to_scheduler(nodes: Sequence[SlurmNode], pool_from: str = "partition",
                 partitions: Optional[dict] = None, log=None,
                 switches: Optional[dict] = None) -> list[tuple[Node, list[Gpu]]]:
    """The GPU nodes as ``(Node, its GPUs)``. GPU indices run on across nodes
    (the service keys its GPU records by them); node-local number i is
    ``gpus[i]``. ``switches`` is ``parse_topology``'s."""
    out: list[tuple[Node, list[Gpu]]] = []
    index = 0
    for sn in sorted(nodes, key=lambda n: n.name):
        if sn.gpus <= 0:
            continue
        pool = pool_of(sn, pool_from, partitions or {})
        if pool is None:
            if log is not None:
                log.warning("Slurm node %s is left out: no pool (partitions %s, GPU types %s)",
                            sn.name, ",".join(sn.partitions) or "none",
                            ",".join(sn.gpu_types) or "untyped")
            continue
        flags = unhealthy_flags(sn.state)
        drained = any(f in DRAIN_FLAGS for f in flags)
        bad = [f for f in flags if f not in DRAIN_FLAGS]
        why = f"Slurm: {sn.state}" + (f" ({sn.reason})" if sn.reason else "") if flags else ""
        model = sn.gpu_types[0] if len(sn.gpu_types) == 1 else "gpu"
        gpus = [Gpu(index=index + i, uuid=f"slurm-{sn.name}-gpu{i}", model=model, memory_mib=0,
                    pool=pool, healthy=not bad, health_reason=why) for i in range(sn.gpus)]
        index += sn.gpus
        out.append((Node(sn.name, pool, sn.gpus, healthy=not bad, drained=drained,
                         cpus=sn.cpus, memory=sn.memory, whole_cpus=True,
                         topology=dict((switches or {}).get(sn.name, {})),
                         labels={"slurm.partition": sn.partitions[0]} if sn.partitions else {}),
                    gpus))
    return out
