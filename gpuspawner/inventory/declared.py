"""GPUs an admin declares in the config, for hosts (or tests) without NVML."""
from __future__ import annotations

from typing import Any

from ..isolation.gpu_rules import CUDA_UUID
from .model import Gpu, InventoryError, pool_name

__all__ = ["declared_gpus"]

_KEYS = ("model", "count", "memory_mib", "pool", "uuids")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def declared_gpus(spec: list[dict]) -> list[Gpu]:
    """Expand ``[{"model", "count", "memory_mib", "pool"?, "uuids"?}, ...]`` into GPUs.

    Indices run on across entries; the pool defaults to ``pool_name(model)``.
    ``uuids``, one per GPU, are the GPUs' CUDA UUIDs (``nvidia-smi -L``), by
    which CUDA_VISIBLE_DEVICES then names them; without them a GPU's UUID is
    ``GPU-declared-<index>``, which names nothing to CUDA (then by index).
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
        pool = entry.get("pool", pool_name(model))
        if not isinstance(pool, str) or not pool.strip():
            raise InventoryError(f"{where}: 'pool' must be a non-empty string, got {pool!r}")
        uuids = entry.get("uuids")
        if uuids is not None and (not isinstance(uuids, list) or len(uuids) != entry["count"]
                                  or not all(isinstance(u, str) and CUDA_UUID.fullmatch(u)
                                             for u in uuids)):
            raise InventoryError(f"{where}: 'uuids' must be a list of {entry['count']} CUDA "
                                 f"UUIDs like 'GPU-2f6b1c1e-8a47-4f5e-b8d1-0c9b0a1d2e3f' "
                                 f"(nvidia-smi -L), got {uuids!r}")
        for n in range(entry["count"]):
            index = len(gpus)
            gpus.append(Gpu(index=index, uuid=uuids[n] if uuids else f"GPU-declared-{index}",
                            model=model, memory_mib=entry["memory_mib"], pool=pool))
    return gpus
