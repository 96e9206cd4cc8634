"""GPUs an admin declares in the config, for hosts (or tests) without NVML."""
from __future__ import annotations

import re
from typing import Any, Optional

from ..isolation.gpu_rules import CUDA_UUID
from .model import Gpu, InventoryError, mig_pool, pool_name

__all__ = ["declared_gpus"]

_KEYS = ("model", "count", "memory_mib", "pool", "uuids", "mig_profile", "parent_index",
         "gpu_instances")
MIG_PROFILE = re.compile(r"([1-7]c\.)?[1-8]g\.[0-9]+gb")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def declared_gpus(spec: list[dict]) -> list[Gpu]:
    """Expand ``[{"model", "count", "memory_mib", "pool"?, "uuids"?}, ...]`` into GPUs.

    Indices run on across entries; the pool defaults to ``pool_name(model)``.
    ``uuids``, one per GPU, are the GPUs' CUDA UUIDs (``nvidia-smi -L``), by
    which CUDA_VISIBLE_DEVICES then names them; without them a GPU's UUID is
    ``GPU-declared-<index>``, which names nothing to CUDA (then by index).
    An entry with ``mig_profile`` (``"1g.18gb"``) declares MIG devices of
    the GPU ``parent_index`` (its NVML index and /dev/nvidia minor), in the
    pool ``<slug of model>-mig-<profile>`` by default; ``gpu_instances``, one
    ``[gi, ci]`` per device, are their GPU/compute instance ids (which name
    their capability device files; without them the device cgroup cannot
    tell the slices of one GPU apart). Their UUIDs, if given, are ``MIG-...``.
    Raises ``InventoryError`` naming the entry and field on any mistake.
    """
    if not isinstance(spec, (list, tuple)):
        raise InventoryError(f"declared GPUs must be a list of entries, got {type(spec).__name__}")
    gpus: list[Gpu] = []
    for n, entry in enumerate(spec):
        where = f"declared GPU entry {n}"
        if not isinstance(entry, dict):
            raise InventoryError(f"{where} must be a dict with keys {', '.join(_KEYS)}; "
                                 f"got {type(entry).__name__}")
        unknown = sorted(str(k) for k in entry if k not in _KEYS)
        if unknown:
            raise InventoryError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                                 f"allowed: {', '.join(_KEYS)}")
        model = entry.get("model")
        if not isinstance(model, str) or not model.strip():
            raise InventoryError(f"{where}: 'model' must be a non-empty string, got {model!r}")
        where = f"{where} ({model!r})"
        for field in ("count", "memory_mib"):
            if field not in entry:
                raise InventoryError(f"{where}: '{field}' is required (a positive integer)")
            if not _positive_int(entry[field]):
                raise InventoryError(f"{where}: '{field}' must be a positive integer, "
                                     f"got {entry[field]!r}")
        mig = _mig_fields(entry, where)
        pool = entry.get("pool", mig_pool(pool_name(model), mig["mig_profile"])
                         if mig else pool_name(model))
        if not isinstance(pool, str) or not pool.strip():
            raise InventoryError(f"{where}: 'pool' must be a non-empty string, got {pool!r}")
        uuids = _uuids(entry, where, bool(mig))
        instances = mig.pop("gpu_instances", None) or [(None, None)] * entry["count"]
        for n in range(entry["count"]):
            index = len(gpus)
            fallback = f"{'MIG' if mig else 'GPU'}-declared-{index}"
            extra = ({**mig, "gpu_instance": instances[n][0], "compute_instance": instances[n][1]}
                     if mig else {})
            gpus.append(Gpu(index=index, uuid=uuids[n] if uuids else fallback,
                            model=model, memory_mib=entry["memory_mib"], pool=pool, **extra))
    return gpus


def _uuids(entry: dict, where: str, mig: bool) -> Optional[list]:
    """An entry's ``uuids``: one CUDA UUID per GPU (``MIG-...`` for MIG devices), or None."""
    uuids = entry.get("uuids")
    if uuids is not None and (not isinstance(uuids, list) or len(uuids) != entry["count"]
                              or not all(isinstance(u, str) and CUDA_UUID.fullmatch(u)
                                         for u in uuids)):
        raise InventoryError(f"{where}: 'uuids' must be a list of {entry['count']} CUDA "
                             f"UUIDs like 'GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f' "
                             f"(nvidia-smi -L), got {uuids!r}")
    if mig and uuids and not all(u.startswith("MIG-") for u in uuids):
        raise InventoryError(f"{where}: the 'uuids' of MIG devices are MIG-... UUIDs "
                             f"(nvidia-smi -L), got {uuids!r}")
    return uuids


def _mig_fields(entry: dict, where: str) -> dict:
    """The MIG fields of a declared entry ({} for whole GPUs), checked."""
    mig_keys = ("mig_profile", "parent_index", "gpu_instances")
    if not any(k in entry for k in mig_keys):
        return {}
    profile = entry.get("mig_profile")
    if not isinstance(profile, str) or not MIG_PROFILE.fullmatch(profile):
        raise InventoryError(f"{where}: 'mig_profile' must be a MIG profile like '1g.18gb' "
                             f"or '1c.3g.71gb' (nvidia-smi mig -lgip), got {profile!r}")
    parent = entry.get("parent_index")
    if not isinstance(parent, int) or isinstance(parent, bool) or parent < 0:
        raise InventoryError(f"{where}: MIG devices need 'parent_index', the NVML index of "
                             f"their GPU (an integer from 0), got {parent!r}")
    instances = entry.get("gpu_instances")
    if instances is not None and (
            not isinstance(instances, list) or len(instances) != entry["count"]
            or not all(isinstance(p, (list, tuple)) and len(p) == 2
                       and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                               for x in p) for p in instances)):
        raise InventoryError(f"{where}: 'gpu_instances' must be a list of {entry['count']} "
                             f"[GPU instance id, compute instance id] pairs, got {instances!r}")
    return {"mig_profile": profile, "parent_index": parent,
            "gpu_instances": [tuple(p) for p in instances] if instances else None}
