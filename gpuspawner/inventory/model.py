"""What the hub knows about one GPU, and how a GPU model becomes a pool name."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["Gpu", "InventoryError", "pool_name"]


class InventoryError(Exception):
    """The host's GPUs could not be listed, or the declared list is wrong."""


@dataclass(frozen=True)
class Gpu:
    """One GPU of this host.

    ``healthy=False`` takes the GPU out of scheduling; ``health_reason`` says why.
    ``utilization_pct`` and ``memory_used_mib`` are a sample taken at discovery
    (``None`` where unknown, e.g. a declared GPU or a GPU that does not report it).
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
