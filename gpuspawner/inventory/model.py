"""What the hub knows about one GPU, and how a GPU model becomes a pool name."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["Gpu", "InventoryError", "mig_pool", "mig_profile", "pool_name"]


class InventoryError(Exception):
    """The host's GPUs could not be listed, or the declared list is wrong."""


@dataclass(frozen=True)
class Gpu:
    """One GPU of this host.

    ``healthy=False`` takes the GPU out of scheduling; ``health_reason`` says why.
    ``utilization_pct`` and ``memory_used_mib`` are a sample taken at discovery
    (``None`` where unknown, e.g. a declared GPU or a GPU that does not report it).

    A MIG device (a slice of a GPU in MIG mode, docs/gpus.md) is a device of
    its own: ``uuid`` is its ``MIG-...`` UUID, ``mig_profile`` its profile
    (``1g.18gb``), ``parent_index`` the NVML index of the GPU it lies on and
    ``gpu_instance``/``compute_instance`` its ids there (which name its
    capability device files). ``note`` says what the inventory noticed that
    does not make the device unhealthy (a pending MIG mode change).
    """

    index: int
    uuid: str
    model: str
    memory_mib: int
    pool: str
    healthy: bool = True
    health_reason: str = ""
    utilization_pct: Optional[float] = None
    memory_used_mib: Optional[int] = None
    mig_profile: str = ""
    parent_index: Optional[int] = None
    gpu_instance: Optional[int] = None
    compute_instance: Optional[int] = None
    note: str = ""

    @property
    def is_mig(self) -> bool:
        return bool(self.mig_profile)


# Vendor and brand words that say nothing about the hardware.
_BRAND_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro"})


def pool_name(model: str) -> str:
    """A slug for a GPU model, usable as a pool name.

    >>> pool_name("NVIDIA H200"), pool_name("Tesla V100-PCIE-16GB"), pool_name("NVIDIA GeForce RTX 4090")
    ('h200', 'v100-pcie-16gb', 'rtx-4090')

    Brand words (NVIDIA, Tesla, GeForce, Quadro) are dropped unless nothing else
    is left; a name with no letters or digits at all gives ``"gpu"``.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", str(model).lower()) if w]
    kept = [w for w in words if w not in _BRAND_WORDS]
    return "-".join(kept or words) or "gpu"


def mig_profile(gpu_slices: int, compute_slices: int, memory_mb: int) -> str:
    """A MIG device's profile as ``nvidia-smi`` names it, from its attributes
    (``nvmlDeviceGetAttributes`` on the MIG handle): ``<g>g.<mem>gb``, with
    ``<c>c.`` in front when the compute instance has fewer slices than its
    GPU instance; the memory in GiB, rounded up.

    >>> mig_profile(1, 1, 17920), mig_profile(7, 7, 143616), mig_profile(3, 1, 40192)
    ('1g.18gb', '7g.141gb', '1c.3g.40gb')
    """
    gb = -(-int(memory_mb) // 1024)
    name = f"{gpu_slices}g.{gb}gb"
    return name if compute_slices in (0, gpu_slices) else f"{compute_slices}c.{name}"


def mig_pool(pool: str, profile: str) -> str:
    """The pool (GPU type) of a MIG device: its GPU's pool, ``-mig-`` and the
    profile, as the Kubernetes backend names the device plugin's
    ``nvidia.com/mig-<profile>`` resources (``h200-mig-1g.18gb``)."""
    return f"{pool}-mig-{profile}"
