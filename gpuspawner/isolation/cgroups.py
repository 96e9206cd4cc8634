"""GPU enforcement and memory/CPU limits on this machine, the kernel side.

``GpuEnforcement.detect()`` finds what this host allows (see ``gpu_rules``
for the modes) and says so; the service reports it at start, in
``GET /health`` and on the admin panel's heat map. Then, per server, job or
replica:

- ``cgroup-v1 devices``: ``create()`` makes a cgroup in the devices
  hierarchy that denies every per-GPU node but the placement's; the process
  joins it with ``enter()`` in its preexec, before anything else, so it
  binds root too; ``remove()`` when it ended. The cgroups live under the
  creating process's own cgroup of each controller, in
  ``GpuEnforcement.cgroup_parent``.
- ``device groups`` (no devices controller, but root and the nodes):
  ``setup_device_groups()`` gives each /dev/nvidiaN its own group and mode
  0660 (the originals are kept in a file, put back by
  ``restore_device_groups()`` on a clean stop); ``enter()`` gives the
  process only its GPUs' groups. Binds processes that do not run as root.
- ``advisory``: CUDA_VISIBLE_DEVICES only.

Whatever the GPU mode, as root with the cgroup v1 memory, cpu and pids
controllers (and ``mode`` not ``off``), every server, job and replica also
gets a cgroup in each, held to its CPU and memory request (or its kind's
default, resources.py) and ``WorkloadResources.pids_limit``.
"""
from __future__ import annotations

import grp
import logging
import os
import re
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from traitlets import Dict, Enum, Instance, Unicode, default
from traitlets.config import LoggingConfigurable

from ..jsonfile import read_json, write_json
from . import gpu_rules as rules
from . import identity
from .gpu_rules import (ADVISORY, CGROUP_V1, DEVICE_GROUPS, LIMIT_CONTROLLERS, LIMITS_NONE, Limits,
                        limits_enforced)
from .placement import Placement
from .resources import WorkloadResources

CONTROLLERS = ("devices", *LIMIT_CONTROLLERS)
log = logging.getLogger(__name__)


def safe_name(*parts: str) -> str:
    """A cgroup directory name from parts (user names, workload ids)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts))[:200]


def server_cgroup_name(user: str, server: str, workload_id: str) -> str:
    """A notebook server's cgroup name: the spawner makes it, and the
    service finds a shared GPU's server processes by it (its workload id)."""
    return safe_name("server", user, server or "default", workload_id)


def own_cgroups(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """controller -> this process's cgroup path in it (cgroup v1 lines)."""
    out = {}
    try:
        with open(proc_cgroup) as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                for name in names.split(","):
                    if name:
                        out[name] = path
    except OSError:
        pass
    return out


class GpuEnforcement(LoggingConfigurable):
    """How servers, jobs and replicas on this machine are held to their GPUs,
    memory and CPUs (docs/service.md, "GPU enforcement and limits")."""

    mode = Enum(["auto", "cgroup", "groups", "off"], "auto", help="""
        ``auto``: a cgroup v1 devices controller where there is a writable one
        (binds root too), else per-GPU device groups where this runs as root
        and the GPU nodes exist (binds non-root processes), else advisory
        (CUDA_VISIBLE_DEVICES only, reported as such). ``cgroup`` or
        ``groups`` insist on that mode (the start fails without it);
        ``off`` is advisory.
        """).tag(config=True)

    cgroup_root = Unicode("/sys/fs/cgroup", help="""
        Where the cgroup v1 controllers (devices, memory, cpu) are mounted.
        """).tag(config=True)

    cgroup_parent = Unicode(help="""
        The cgroup (under this process's own cgroup of each controller) in
        which each server, job and replica gets its own. Default:
        ``gpuhub-<hub tag>`` (isolation/identity.py), this hub's alone: two
        hubs on one host never share one.
        """).tag(config=True)

    hub_tag = Unicode(help="""
        This hub's tag (isolation/identity.py), set by the service or the
        spawner that makes this: names the default ``cgroup_parent``.
        """)

    @default("cgroup_parent")
    def _cgroup_parent_default(self):
        return identity.cgroup_parent(self.hub_tag) if self.hub_tag else "gpuhub"

    dev_dir = Unicode("/dev", help="""
        Where the GPU device nodes (nvidiaN, nvidiactl, ...) are: for the
        device-group fallback, which changes their group and mode.
        """).tag(config=True)

    group_prefix = Unicode("gpuhub-gpu", help="""
        The device-group fallback's group of /dev/nvidiaN is this prefix and N.
        """).tag(config=True)

    team_limits = Dict(help="""
        Memory and CPU caps per team for each server, job and replica:
        ``{team: {"memory": "16G", "cpus": 4}}``. A team's value wins over its
        pool's, a pool's over ``default_limits``. A workload gets its own
        request (``WorkloadResources``) but no more than the cap; one with no
        request (a notebook server) gets the cap, else its kind's default.
        Enforced through the cgroup v1 memory and cpu controllers; elsewhere
        reported as not enforced.

        Example::

            c.GpuEnforcement.team_limits = {"vision": {"memory": "64G", "cpus": 16}}
        """).tag(config=True)

    pool_limits = Dict(help="""
        Memory and CPU limits per pool, as ``team_limits``:
        ``{"h100": {"memory": "128G", "cpus": 24}}``.
        """).tag(config=True)

    default_limits = Dict(help="""
        Memory and CPU caps where neither the team nor the pool sets one:
        ``{"memory": "32G", "cpus": 8}``. Empty: no cap (each workload still
        gets its request, or its kind's default: ``WorkloadResources``).
        """).tag(config=True)

    resources = Instance(WorkloadResources, help="""
        The default requests per kind and the pids limit (configured as
        ``c.WorkloadResources``).
        """)

    @default("resources")
    def _resources_default(self):
        return WorkloadResources(parent=self)

    gpu_mode: str = ADVISORY
    limits_mode: str = LIMITS_NONE
    notes: list[str]
    minors: dict[int, int]
    # a MIG device's UUID -> (its GPU's minor, GPU instance, compute instance)
    mig: dict[str, tuple[int, Optional[int], Optional[int]]]
    caps_major: Optional[int] = None
    mig_minors: dict[str, int]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.notes, self.minors, self.mig, self.mig_minors = [], {}, {}, {}
        self._by_team = rules.check_limits(self.team_limits, "GpuEnforcement.team_limits")
        self._by_pool = rules.check_limits(self.pool_limits, "GpuEnforcement.pool_limits")
        self._default = rules.check_entry(self.default_limits, "GpuEnforcement.default_limits")
        for kind in ("notebook", "job", "deployment"):
            self.resources.default_for(kind)  # a wrong default stops the start
        self._parents: dict[str, str] = {}

    # ---- what this host allows -------------------------------------------
    def detect(self, processes_as_root: bool = False) -> "GpuEnforcement":
        """Find the modes; raises LimitError when ``mode`` insists on one this
        host lacks. ``processes_as_root``: the servers or jobs run as root
        (user accounts off), which device groups do not bind."""
        root = os.geteuid() == 0
        mine = own_cgroups()
        probe = root and self.mode != "off"
        usable = {c: self._usable(c, mine) for c in CONTROLLERS} if probe else {}
        missing = [c for c in LIMIT_CONTROLLERS if probe and not usable.get(c)]
        if missing:
            self.notes.append(f"not limited here: {', '.join(missing)} (no writable cgroup v1 "
                              f"controller)")
        if not root:
            self.notes.append("not running as root: no cgroups, no device groups")
        elif os.path.exists(os.path.join(self.cgroup_root, "cgroup.controllers")):
            self.notes.append("cgroup v2: the eBPF device program is not implemented")
        nodes = self.gpu_nodes()
        groups_possible = root and bool(nodes) and not processes_as_root
        if root and nodes and processes_as_root and not usable.get("devices"):
            self.notes.append("device groups would bind nothing: with user accounts off "
                              "everything runs as root")
        self.gpu_mode = rules.choose_gpu_mode(self.mode, bool(usable.get("devices")),
                                              groups_possible)
        if self.gpu_mode == DEVICE_GROUPS and self._driver_resets_modes():
            self.notes.append("the NVIDIA driver resets device file modes "
                              "(NVreg_ModifyDeviceFiles=1): set it to 0 for device groups")
        if self.gpu_mode == CGROUP_V1:
            self._parents["devices"] = usable["devices"]
        # Limits hold whatever holds the GPUs: a CPU-only job has none.
        for c in LIMIT_CONTROLLERS:
            if usable.get(c):
                self._parents[c] = usable[c]
        self.limits_mode = limits_enforced(self._parents)
        if self.limits_mode == LIMITS_NONE and (self._by_team or self._by_pool or self._default):
            self.notes.append("memory/CPU limits are configured but cannot be enforced here")
        if "memory" in self._parents and not self._swap_limited():
            self.notes.append("memory: swap is not limited (no memory.memsw.limit_in_bytes: "
                              "boot with swapaccount=1)")
        if self.gpu_mode != ADVISORY:
            self.minors = _nvml_minors()
        if self.gpu_mode == CGROUP_V1:
            self.caps_major = rules.char_major(_read("/proc/devices"), "nvidia-caps")
            self.mig_minors = rules.parse_mig_minors(_read("/proc/driver/nvidia-caps/mig-minors"))
        if self.gpu_mode != ADVISORY:
            self.know_devices(_nvml_mig_devices())
        return self

    def know_devices(self, gpus) -> None:
        """Learn MIG devices (inventory ``Gpu`` records): their GPU's node and
        their capability nodes, by UUID, for ``create``. ``detect`` learns
        NVML's; the service adds its inventory's (declared MIG devices)."""
        self.mig.update({g.uuid: (self.minors.get(g.parent_index, g.parent_index),
                                  g.gpu_instance, g.compute_instance)
                         for g in gpus if g.is_mig})
        if not self.mig or self.gpu_mode == ADVISORY:
            return
        if self.gpu_mode == DEVICE_GROUPS:
            note = ("MIG devices: device groups guard whole GPUs only; the slices of one GPU "
                    "are not kept from each other")
        else:
            unknown = sorted(u for u, d in self.mig.items() if not self._caps_known(d))
            note = (f"MIG devices {', '.join(unknown)}: their capability nodes are not known "
                    f"(/dev/nvidia-caps, /proc/driver/nvidia-caps/mig-minors): the device "
                    f"cgroup does not keep them from each other") if unknown else ""
        if note and note not in self.notes:
            self.notes.append(note)

    def _caps_known(self, device) -> bool:
        if self.caps_major is None or None in device:
            return False
        try:
            rules.mig_cap_minors(self.mig_minors, *device)
        except ValueError:
            return False
        return True

    def device_rules(self, gpus: Iterable[int], uuids: Sequence[str] = ()) -> list[str]:
        """The ``devices.deny`` lines of a placement of the inventory devices
        ``gpus`` (``uuids``, where known, in the same order): the per-GPU
        nodes not given (a MIG device gives its GPU's), then the capability
        nodes of the other MIG devices."""
        gpus, uuids = list(gpus), list(uuids)
        out = rules.device_deny_rules({self.device_minor(i, u) for i, u in _pairs(gpus, uuids)})
        known = [d for d in self.mig.values() if self._caps_known(d)]
        if known:
            given = [self.mig[u] for u in uuids if u in self.mig and self._caps_known(self.mig[u])]
            out += rules.mig_cap_deny_rules(self.caps_major, self.mig_minors, known, given)
        return out

    def device_minor(self, index: int, uuid: str = "") -> int:
        if uuid in self.mig:
            return self.mig[uuid][0]
        return self.minors.get(index, index)

    def report(self) -> dict:
        return {"gpu_enforcement": self.gpu_mode, "limits": self.limits_mode,
                "notes": list(self.notes)}

    def _usable(self, controller: str, mine: dict[str, str]) -> Optional[str]:
        """Our parent cgroup in ``controller`` if a child can be made there."""
        base = os.path.join(self.cgroup_root, controller)
        marker = {"devices": "devices.deny", "memory": "memory.limit_in_bytes",
                  "cpu": "cpu.cfs_quota_us", "pids": "cgroup.procs"}[controller]
        if not os.path.exists(os.path.join(base, marker)):
            return None
        parent = os.path.join(base, mine.get(controller, "/").lstrip("/"), self.cgroup_parent)
        probe = os.path.join(parent, f"probe-{os.getpid()}")
        existed = os.path.isdir(parent)
        try:
            os.makedirs(probe, exist_ok=True)
            if controller == "devices":
                _write(probe, "devices.deny", f"c {rules.NVIDIA_MAJOR}:253 rwm")
            elif controller == "pids":
                _write(probe, "pids.max", "max")
            os.rmdir(probe)
            if not existed:
                os.rmdir(parent)  # made again by the first create(): none left if none is
        except OSError as e:
            self.notes.append(f"cgroup v1 {controller}: cannot make a child cgroup ({e})")
            return None
        return parent

    def gpu_nodes(self) -> dict[int, str]:
        """minor -> path of every per-GPU node in dev_dir."""
        out = {}
        try:
            names = os.listdir(self.dev_dir)
        except OSError:
            return out
        for name in names:
            kind = rules.classify_node(name)
            if kind and kind[0] == "gpu":
                out[kind[1]] = os.path.join(self.dev_dir, name)
        return out

    @staticmethod
    def _driver_resets_modes() -> bool:
        try:
            with open("/proc/driver/nvidia/params") as f:
                return "ModifyDeviceFiles: 1" in f.read()
        except OSError:
            return False

    # ---- one server, job or replica --------------------------------------
    def _swap_limited(self) -> bool:
        return os.path.exists(os.path.join(self.cgroup_root, "memory",
                                           "memory.memsw.limit_in_bytes"))

    def limits_for(self, team: str, pool: str, kind: str = "job",
                   request: Limits = Limits()) -> Limits:
        """Each of memory and CPUs: the workload's request, capped by its
        team's (else pool's, else the default) limit; with no request, that
        limit, else its kind's default request. Never unlimited."""
        cap = rules.resolve_limits(team, pool, self._by_team, self._by_pool, self._default)
        kind_default = self.resources.default_for(kind)

        def pick(asked, capped, fallback):
            if asked is None:
                return capped if capped is not None else fallback
            return asked if capped is None else min(asked, capped)
        return Limits(pick(request.memory_bytes, cap.memory_bytes, kind_default.memory_bytes),
                      pick(request.cpus, cap.cpus, kind_default.cpus))

    def create(self, name: str, gpus: Iterable[int], team: str = "", pool: str = "",
               uuids: Sequence[str] = (), kind: str = "job",
               request: Limits = Limits()) -> Placement:
        """The placement for GPUs ``gpus`` (inventory indices; ``uuids``
        their UUIDs where known, which tell MIG devices) of ``team`` in
        ``pool``, a workload of ``kind`` that asked for ``request`` (CPUs,
        memory). Raises OSError when the kernel refuses; nothing is left
        behind then."""
        gpus = list(gpus)
        placement = Placement()
        if self.gpu_mode == DEVICE_GROUPS:
            # A GPU's slices: its group, once.
            minors = dict.fromkeys(self.device_minor(i, u) for i, u in _pairs(gpus, list(uuids)))
            placement.gids = [self._group_gid(m) for m in minors]
        limits = self.limits_for(team, pool, kind, request)
        try:
            if self.gpu_mode == CGROUP_V1:
                path = self._make("devices", name)
                placement.cgroups.append(path)
                _write(path, "devices.deny", *self.device_rules(gpus, uuids))
            if "memory" in self._parents:
                path = self._make("memory", name)
                placement.cgroups.append(path)
                _write(path, "memory.limit_in_bytes", str(limits.memory_bytes))
                if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                    _write(path, "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            if "cpu" in self._parents:
                path = self._make("cpu", name)
                placement.cgroups.append(path)
                _write(path, "cpu.cfs_period_us", str(rules.CPU_PERIOD_US))
                _write(path, "cpu.cfs_quota_us", str(rules.cpu_quota_us(limits.cpus)))
            if "pids" in self._parents and self.resources.pids_limit > 0:
                path = self._make("pids", name)
                placement.cgroups.append(path)
                _write(path, "pids.max", str(self.resources.pids_limit))
        except BaseException:
            remove(placement)
            raise
        return placement

    def existing(self, name: str) -> list[str]:
        """The cgroup directories called ``name`` (``create``'s) that exist now."""
        return [path for path in (os.path.join(parent, name) for parent in self._parents.values())
                if os.path.isdir(path)]

    def _make(self, controller: str, name: str) -> str:
        path = os.path.join(self._parents[controller], name)
        try:
            os.makedirs(path)  # and the parent, the first time
        except FileNotFoundError:
            # The parent went between makedirs' steps: another process's
            # detection removed it while it was empty. Once more.
            os.makedirs(path)
        return path

    def _group_gid(self, minor: int) -> int:
        name = rules.gpu_group(minor, self.group_prefix)
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
            return grp.getgrnam(name).gr_gid

    # ---- the device-group fallback's nodes -------------------------------
    def setup_device_groups(self, state_file: str) -> None:
        """Each GPU node: its own group, mode 0660. The first setup records
        the originals (a restart after a crash keeps the first record)."""
        nodes = self.gpu_nodes()
        saved = read_json(state_file) or {}
        for minor, path in sorted(nodes.items()):
            st = os.stat(path)
            saved.setdefault(path, {"uid": st.st_uid, "gid": st.st_gid,
                                    "mode": stat.S_IMODE(st.st_mode)})
        write_json(state_file, saved)
        for minor, path in sorted(nodes.items()):
            os.chown(path, 0, self._group_gid(minor))
            os.chmod(path, 0o660)

    @staticmethod
    def restore_device_groups(state_file: str) -> None:
        """Put the nodes' owners and modes back as they were before setup."""
        saved = read_json(state_file)
        if saved is None:
            return
        for path, orig in saved.items():
            try:
                os.chown(path, orig["uid"], orig["gid"])
                os.chmod(path, orig["mode"])
            except FileNotFoundError:
                pass
        os.unlink(state_file)


def remove(placement: Placement, wait: float = 5.0, reason: str = "",
           logger: Optional[logging.Logger] = None) -> list[str]:
    """Remove the placement's cgroups (only ever this hub's own: the paths
    its spawner or backend recorded), killing what is still in them; each
    kill is logged with ``reason`` (who asked and why). Returns the ones
    that could not be removed (with a reason)."""
    left = []
    for path in placement.cgroups:
        deadline = time.monotonic() + wait
        while True:
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                _kill_all(path, reason, logger or log)
                if time.monotonic() > deadline:
                    left.append(f"{path}: {e}")
                    break
                time.sleep(0.05)
    return left


def _kill_all(path: str, reason: str, logger: logging.Logger) -> None:
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(p) for p in f.read().split()]
    except OSError:
        return
    if pids:
        logger.warning("SIGKILL to %s (pids %s) in cgroup %s, by process %d removing it: %s",
                       ", ".join(_comm(p) for p in pids), " ".join(map(str, pids)), path,
                       os.getpid(), reason or "no reason given")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _comm(pid: int) -> str:
    return _read(f"/proc/{pid}/comm").strip() or "?"


def _write(path: str, name: str, *values: str) -> None:
    """Each of ``values`` in a write of its own (the kernel reads one rule a
    write), all through one open file: a job without GPUs gets 254 device
    rules, 3.5 ms of CPU opening the file for each and 0.5 ms this way
    (``gpuhub bench api``'s starting submit: a start thread's CPU)."""
    fd = os.open(os.path.join(path, name), os.O_WRONLY)
    try:
        for value in values:
            os.write(fd, value.encode())
    finally:
        os.close(fd)


def _pairs(gpus: list[int], uuids: list[str]) -> list[tuple[int, str]]:
    return list(zip(gpus, uuids if len(uuids) == len(gpus) else [""] * len(gpus)))


def _nvml_mig_devices() -> list:
    """NVML's MIG devices (inventory records); none without NVML."""
    from ..inventory import InventoryError, read_nvml
    try:
        return [g for g in read_nvml() if g.is_mig]
    except InventoryError:
        return []


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _nvml_minors() -> dict[int, int]:
    """NVML index -> /dev/nvidia<minor>; empty without NVML (then minor = index)."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        return {i: pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(pynvml.nvmlDeviceGetCount())}
    except Exception:
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
