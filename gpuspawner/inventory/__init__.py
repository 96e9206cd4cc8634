"""Where a host's GPUs come from: NVML, or a list declared in the config.

Entry point: ``Inventory(config=...).discover()`` -> ``(source, [Gpu, ...])``.
"""
from .config import Inventory
from .declared import declared_gpus
from .model import Gpu, InventoryError, pool_name
from .nvml import NvmlUnavailable, read_nvml, sample_utilization

__all__ = [
    "Gpu", "Inventory", "InventoryError", "NvmlUnavailable", "declared_gpus", "pool_name",
    "read_nvml", "sample_utilization",
]
