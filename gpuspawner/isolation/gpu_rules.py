"""What a placement may open and use, decided without touching the system.

NVIDIA's device nodes are of two kinds:

- per-GPU nodes ``/dev/nvidiaN``: character devices with major 195 and
  minor N (0-253);
- control nodes every CUDA process needs, whichever GPUs it has:
  ``nvidiactl`` (195:255), ``nvidia-modeset`` (195:254), ``nvidia-uvm``,
  ``nvidia-uvm-tools`` and ``nvidia-caps/*`` (majors the kernel picks).

A device cgroup of a placement denies every per-GPU minor the placement was
not given and nothing else, so the control nodes and every other device
stay as they were (a cgroup v1 child inherits its parent's list; a wildcard
deny could not be punched again by an allow). The fallback gives each GPU
node a group of its own, and a process only the groups of its GPUs.

MIG devices (docs/gpus.md): a MIG device is reached through its GPU's
``/dev/nvidiaN`` and two capability nodes, ``/dev/nvidia-caps/nvidia-capM``
for its GPU instance and for its compute instance, whose minors
``/proc/driver/nvidia-caps/mig-minors`` lists (``gpu0/gi7/access 66``,
``gpu0/gi7/ci0/access 67``; the major is ``nvidia-caps`` in /proc/devices).
A placement of MIG devices is allowed their GPUs' nodes and their own
capability nodes; the capability nodes of every other MIG device of the host,
and ``config`` (which creates and destroys MIG instances), are denied.

Memory and CPU limits come per team, per pool, or a default (team over pool
over default, each key on its own).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

NVIDIA_MAJOR = 195
# What NVML and CUDA call a GPU (or a MIG instance) by, whatever its number.
CUDA_UUID = re.compile(r"(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
GPU_MINORS = range(0, 254)   # 254: nvidia-modeset, 255: nvidiactl
CONTROL_NODES = ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps")

# How GPUs are enforced; reported at start, in /health and on the heat map.
CGROUP_V1 = "cgroup-v1 devices"
DEVICE_GROUPS = "device groups"
ADVISORY = "advisory"
# How memory/CPU/pids limits are enforced: the cgroup v1 controllers that
# hold every server, job and replica ("cgroup-v1 memory, cpu, pids").
LIMIT_CONTROLLERS = ("memory", "cpu", "pids")
LIMITS_CGROUP_V1 = "cgroup-v1 memory, cpu, pids"
LIMITS_NONE = "not enforced"


def limits_enforced(controllers) -> str:
    """What /health says of limits: exactly the controllers in use."""
    used = [c for c in LIMIT_CONTROLLERS if c in set(controllers)]
    return f"cgroup-v1 {', '.join(used)}" if used else LIMITS_NONE


class LimitError(ValueError):
    """A limit in the configuration that cannot be used; names the field."""


def classify_node(name: str) -> Optional[tuple[str, Optional[int]]]:
    """``("gpu", N)`` for ``nvidiaN``, ``("control", None)`` for a node every
    CUDA process needs (also what lies under ``nvidia-caps/``), else None."""
    m = re.fullmatch(r"nvidia(\d+)", name)
    if m and int(m.group(1)) in GPU_MINORS:
        return "gpu", int(m.group(1))
    top = name.split("/", 1)[0]
    if top in CONTROL_NODES:
        return "control", None
    return None


def visible_devices(indices: Sequence[int], uuids: Sequence[str] = ()) -> dict[str, str]:
    """The environment that shows a process exactly the host GPUs
    ``indices``: by UUID where each one's is known (``uuids``, in the same
    order), because CUDA numbers only the devices a process may open, so
    under a device cgroup host GPU 3 is CUDA's device 0; by index where not.
    ``GPUHUB_GPU_INDICES`` always says the host indices. No GPUs: none."""
    by_index = ",".join(str(i) for i in indices)
    known = len(uuids) == len(indices) and all(CUDA_UUID.fullmatch(u) for u in uuids)
    names = ",".join(uuids) if known else by_index
    return {"CUDA_VISIBLE_DEVICES": names, "NVIDIA_VISIBLE_DEVICES": names or "none",
            "GPUHUB_GPU_INDICES": by_index}


def device_deny_rules(placed: Iterable[int]) -> list[str]:
    """The ``devices.deny`` lines of a placement: every per-GPU minor it was
    not given. Raises ValueError for a minor outside the per-GPU range."""
    placed = set(placed)
    bad = sorted(m for m in placed if m not in GPU_MINORS)
    if bad:
        raise ValueError(f"GPU minor(s) {bad} are not per-GPU nodes (0-253)")
    return [f"c {NVIDIA_MAJOR}:{m} rwm" for m in GPU_MINORS if m not in placed]


def parse_mig_minors(text: str) -> dict[str, int]:
    """``/proc/driver/nvidia-caps/mig-minors`` as ``{"gpu0/gi7/ci0/access": 67, "config": 1, ...}``."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def char_major(proc_devices: str, name: str) -> Optional[int]:
    """The major of character driver ``name`` in /proc/devices, None if absent."""
    block = proc_devices.split("Block devices:", 1)[0]
    for line in block.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name and parts[0].isdigit():
            return int(parts[0])
    return None


def mig_cap_minors(table: dict[str, int], gpu_minor: int, gi: int, ci: int) -> tuple[int, int]:
    """The (GPU instance, compute instance) capability minors of a MIG device.
    Raises ValueError when the table does not list them."""
    keys = (f"gpu{gpu_minor}/gi{gi}/access", f"gpu{gpu_minor}/gi{gi}/ci{ci}/access")
    missing = [k for k in keys if k not in table]
    if missing:
        raise ValueError(f"mig-minors lists no {', '.join(missing)}")
    return table[keys[0]], table[keys[1]]


def mig_cap_deny_rules(caps_major: int, table: dict[str, int],
                       every: Iterable[tuple[int, int, int]],
                       given: Iterable[tuple[int, int, int]]) -> list[str]:
    """The ``devices.deny`` lines for MIG capability nodes: ``config`` and the
    capabilities of every MIG device of the host (``every``, as
    ``(GPU minor, GPU instance, compute instance)``) that the placement was
    not ``given``. A GPU instance shared by two compute instances stays
    allowed when either is given."""
    allowed = {m for d in given for m in mig_cap_minors(table, *d)}
    denied = {m for d in every for m in mig_cap_minors(table, *d)}
    if "config" in table:
        denied.add(table["config"])
    return [f"c {caps_major}:{m} rwm" for m in sorted(denied - allowed)]


def gpu_group(minor: int, prefix: str = "gpuhub-gpu") -> str:
    """The group that may open /dev/nvidia<minor> in the device-group fallback."""
    return f"{prefix}{minor}"


def choose_gpu_mode(wanted: str, devices_v1: bool, groups_possible: bool) -> str:
    """The mode for ``wanted`` ("auto", "cgroup", "groups" or "off") on this
    host. An explicit mode that cannot be had is an error, not a silent
    downgrade."""
    if wanted == "off":
        return ADVISORY
    if wanted == "cgroup":
        if not devices_v1:
            raise LimitError("GpuEnforcement.mode: 'cgroup' needs a writable cgroup v1 devices "
                             "controller, which this host does not have")
        return CGROUP_V1
    if wanted == "groups":
        if not groups_possible:
            raise LimitError("GpuEnforcement.mode: 'groups' needs root, the GPU device nodes "
                             "and users' accounts (device groups do not bind root)")
        return DEVICE_GROUPS
    if devices_v1:
        return CGROUP_V1
    return DEVICE_GROUPS if groups_possible else ADVISORY


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(value, field: str) -> int:
    """Bytes from an int (bytes) or a string like ``512M``, ``16G``, ``1.5GiB``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if not m or float(m.group(1)) <= 0:
        raise LimitError(f"{field}: {value!r} is not a memory size like 512M or 16G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def parse_cpus(value, field: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise LimitError(f"{field}: {value!r} is not a positive number of CPUs")


CPU_PERIOD_US = 100_000


def cpu_quota_us(cpus: float) -> int:
    """cpu.cfs_quota_us for ``cpus`` CPUs over the default 100 ms period."""
    return max(1000, round(cpus * CPU_PERIOD_US))


@dataclass(frozen=True)
class Limits:
    memory_bytes: Optional[int] = None
    cpus: Optional[float] = None

    def __bool__(self) -> bool:
        return self.memory_bytes is not None or self.cpus is not None


_KEYS = ("memory", "cpus")


def check_entry(entry, where: str) -> Limits:
    """Validate one ``{"memory": ..., "cpus": ...}``; errors name ``where``."""
    if not isinstance(entry, dict):
        raise LimitError(f"{where} must be a dict with keys memory, cpus")
    unknown = sorted(str(k) for k in entry if k not in _KEYS)
    if unknown:
        raise LimitError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: memory, cpus")
    memory, cpus = entry.get("memory"), entry.get("cpus")
    return Limits(None if memory is None else parse_memory(memory, f"{where}.memory"),
                  None if cpus is None else parse_cpus(cpus, f"{where}.cpus"))


def check_limits(table: dict, field: str) -> dict[str, Limits]:
    """Validate ``{name: {"memory": ..., "cpus": ...}}``; errors name the entry."""
    if not isinstance(table, dict):
        raise LimitError(f"{field} must be a dict of name -> {{memory, cpus}}")
    return {name: check_entry(entry, f"{field}[{name!r}]") for name, entry in table.items()}


def resolve_limits(team: str, pool: str, by_team: dict[str, Limits], by_pool: dict[str, Limits],
                   default: Limits = Limits()) -> Limits:
    """Each of memory and cpus: the team's if set, else the pool's, else the default."""
    chain = [by_team.get(team, Limits()), by_pool.get(pool, Limits()), default]
    memory = next((x.memory_bytes for x in chain if x.memory_bytes is not None), None)
    cpus = next((x.cpus for x in chain if x.cpus is not None), None)
    return Limits(memory, cpus)
