"""The ``Inventory`` configurable: where this host's GPUs come from."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Optional

from traitlets import Dict, Enum, Int, List, Unicode
from traitlets.config import LoggingConfigurable

from .declared import declared_gpus
from .model import Gpu, mig_pool
from .nvml import NvmlUnavailable, read_nvml, sample_utilization
from .processes import ProcessReading, read_processes

__all__ = ["Inventory"]

ADMIN_REASON = "marked out of service by an admin"


class Inventory(LoggingConfigurable):
    """Finds this host's GPUs: from NVML, or from a list declared in the config."""

    source = Enum(
        ["auto", "nvml", "declared"],
        default_value="auto",
        help="""
        Where the GPUs come from.

        - "nvml": ask the NVIDIA driver (NVML); fail at start if NVML is not there.
          Use this on GPU hosts, so that a broken driver stops the hub instead of
          silently scheduling onto made-up GPUs.
        - "declared": use `Inventory.declared`, never NVML. For development,
          tests and simulations on machines without GPUs.
        - "auto": NVML when it answers, else the declared list (with a warning
          in the log saying why NVML was not used).

        Example::

            c.Inventory.source = "nvml"
        """,
    ).tag(config=True)

    declared = List(
        Dict(),
        default_value=[{"model": "Fake GPU", "count": 4, "memory_mib": 16384, "pool": "default"}],
        help="""
        The GPUs to use when they do not come from NVML (source "declared", or
        "auto" on a host without NVML).

        Each entry gives `model`, `count` and `memory_mib` (per GPU), and
        optionally `pool` (default: a slug of the model, e.g. "a100-sxm4-80gb")
        and `uuids` (one CUDA UUID per GPU, as `nvidia-smi -L` prints them:
        then CUDA_VISIBLE_DEVICES names the GPUs by UUID, as with NVML).
        An entry may declare MIG devices instead of whole GPUs: `mig_profile`
        (e.g. "1g.18gb"), `parent_index` (the GPU they lie on) and optionally
        `gpu_instances` ([[gi, ci], ...]); see docs/gpus.md.
        Indices are numbered on across entries. The default is four 16 GiB fake
        GPUs in the pool "default", enough to try the hub on a laptop.

        Example::

            c.Inventory.declared = [
                {"model": "NVIDIA A100-SXM4-80GB", "count": 4, "memory_mib": 81920, "pool": "a100"},
                {"model": "NVIDIA L4", "count": 2, "memory_mib": 23034},
            ]
        """,
    ).tag(config=True)

    pool = Unicode(
        "",
        help="""
        Put every GPU found by NVML into this pool instead of a pool named
        after its model (e.g. "h200").

        Useful when one host's GPUs should be scheduled as one pool whatever
        the driver calls them, or to keep pool names stable across a hardware
        refresh. Empty (the default) means one pool per GPU model. Declared
        GPUs take their pool from their own entry instead. MIG devices go
        into this name, "-mig-" and their profile ("training-mig-1g.18gb"):
        slices of different sizes are not the same GPU type.

        Example::

            c.Inventory.pool = "training"
        """,
    ).tag(config=True)

    unhealthy = List(
        Int(),
        default_value=[],
        help="""
        GPU indices (as `nvidia-smi` numbers them) that an admin takes out of
        service, e.g. a GPU with a fan fault or one reserved for maintenance.

        They stay in the inventory, marked unhealthy with the reason "marked
        out of service by an admin", so nothing is scheduled onto them.

        Example::

            c.Inventory.unhealthy = [3]
        """,
    ).tag(config=True)

    declared_utilization_file = Unicode(
        "",
        help="""
        A JSON file {"GPU index": utilization %} that declared GPUs report as
        their utilization (missing: 0). Demos and tests use it to make fake
        GPUs look busy or idle to the culler and the metrics.

        Example::

            c.Inventory.declared_utilization_file = "/tmp/fake-gpu-util.json"
        """,
    ).tag(config=True)

    declared_processes_file = Unicode(
        "",
        help="""
        A JSON file {"GPU UUID": {"PID": {"memory_mib": M, "sm_pct": P}}}
        that declared GPUs report as NVML's per-process accounting would
        (a GPU not in it: no processes). Tests and demos use it to make a
        share of a fake GPU use more memory than it may, or look busy.

        Example::

            c.Inventory.declared_processes_file = "/tmp/fake-gpu-processes.json"
        """,
    ).tag(config=True)

    source_used = ""

    def processes(self, uuids, since_us=None, nvml: Any = None) -> dict:
        """``{uuid: ProcessReading}``: what each process uses of these GPUs,
        from NVML or, for declared GPUs, ``declared_processes_file``."""
        if self.source_used == "nvml":
            return read_processes(uuids, since_us or {}, nvml)
        values: dict = {}
        if self.declared_processes_file:
            try:
                with open(self.declared_processes_file) as f:
                    values = json.load(f)
            except (OSError, ValueError) as e:
                self.log.warning("cannot read %s: %s", self.declared_processes_file, e)
        memory = {g.uuid: g.memory_mib for g in declared_gpus(self.declared)}
        out = {}
        for uuid in uuids:
            procs = {int(pid): p for pid, p in (values.get(uuid) or {}).items()}
            used = {pid: p.get("memory_mib") for pid, p in procs.items()}
            out[uuid] = ProcessReading(uuid, memory.get(uuid), sum(m or 0 for m in used.values()),
                                       used, {pid: p.get("sm_pct", 0) for pid, p in procs.items()})
        return out

    def sample(self, nvml: Any = None) -> dict[int, tuple[float, Optional[int]]]:
        """``{index: (utilization %, memory used MiB or None)}`` now, from
        the source ``discover`` used."""
        if self.source_used == "nvml":
            return dict(sample_utilization(nvml))
        values: dict = {}
        if self.declared_utilization_file:
            try:
                with open(self.declared_utilization_file) as f:
                    values = json.load(f)
            except (OSError, ValueError) as e:
                self.log.warning("cannot read %s: %s", self.declared_utilization_file, e)
        return {g.index: (float(values.get(str(g.index), 0.0)), None)
                for g in declared_gpus(self.declared)}

    def discover(self, nvml: Any = None) -> tuple[str, list[Gpu]]:
        """``(source used, GPUs)``, the source being "nvml" or "declared".

        ``nvml`` is handed to ``read_nvml`` (tests pass a fake pynvml).
        Raises ``NvmlUnavailable`` for source "nvml" without NVML, and
        ``InventoryError`` for a bad declared list.
        """
        if self.source == "declared":
            used, gpus = "declared", declared_gpus(self.declared)
        else:
            try:
                used, gpus = "nvml", read_nvml(nvml)
            except NvmlUnavailable as e:
                if self.source == "nvml":
                    raise
                used, gpus = "declared", declared_gpus(self.declared)
                self.log.warning("%s; using the %d declared GPU(s) of Inventory.declared "
                                 "(set Inventory.source = 'nvml' to make this an error)",
                                 e, len(gpus))
            else:
                if self.pool:
                    gpus = [replace(g, pool=mig_pool(self.pool, g.mig_profile) if g.is_mig
                                    else self.pool) for g in gpus]
                if not gpus:
                    self.log.warning("NVML answered but reports no GPUs on this host")
        self.source_used = used
        return used, self._mark_unhealthy(gpus)

    def _mark_unhealthy(self, gpus: list[Gpu]) -> list[Gpu]:
        marked = set(self.unhealthy)
        missing = sorted(marked - {g.index for g in gpus})
        if missing:
            self.log.warning("Inventory.unhealthy names GPU index(es) %s that this host "
                             "does not have", missing)
        out = []
        for g in gpus:
            if g.index in marked:
                reason = "; ".join(r for r in (ADMIN_REASON, g.health_reason) if r)
                g = replace(g, healthy=False, health_reason=reason)
            out.append(g)
        return out
