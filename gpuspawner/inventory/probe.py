"""What ``scripts/gpu_check.py`` reads back from NVML on a real GPU host, and
nothing it could change: each GPU's MIG mode (current and pending) and MIG
devices, and the GPU memory NVML accounts to one process
(``nvmlDeviceGetComputeRunningProcesses``, on whole GPUs and MIG devices).

Every function takes the ``pynvml`` module (tests hand in a fake) and only
calls NVML's read functions: no ``nvmlDeviceSet*``, no instance created or
destroyed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .nvml import _nvml_error, _session, _text, mig_handles, mig_mode

__all__ = ["DeviceMemory", "mig_lines", "process_memory"]

_MIB = 1024 * 1024


def _mode(value: int) -> str:
    return {0: "disabled", 1: "enabled"}.get(value, f"unknown ({value})")


def mig_lines(nvml: Any) -> list[str]:
    """One line per GPU with its MIG mode, and one per MIG device found."""
    def body(nvml: Any) -> list[str]:
        lines = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mode = mig_mode(nvml, handle)
            if mode is None:
                lines.append(f"GPU {index}: MIG not supported")
                continue
            pending = "" if mode[0] == mode[1] else f", pending {_mode(mode[1])} (after a GPU reset)"
            lines.append(f"GPU {index}: MIG {_mode(mode[0])}{pending}")
            if mode[0] != 1:
                continue
            devices = mig_handles(nvml, index, handle)
            for n, mig in enumerate(devices):
                a = nvml.nvmlDeviceGetAttributes(mig)
                mem = nvml.nvmlDeviceGetMemoryInfo(mig)
                lines.append(
                    f"  MIG device {n}: {_text(nvml.nvmlDeviceGetUUID(mig))} "
                    f"gi={nvml.nvmlDeviceGetGpuInstanceId(mig)} "
                    f"ci={nvml.nvmlDeviceGetComputeInstanceId(mig)} "
                    f"slices={a.gpuInstanceSliceCount}g/{a.computeInstanceSliceCount}c "
                    f"memory={int(mem.total) // _MIB} MiB ({a.memorySizeMB} MB in attributes)")
            if not devices:
                lines.append("  no MIG devices (none created)")
        return lines

    return _session(nvml, body)


@dataclass(frozen=True)
class DeviceMemory:
    """GPU memory NVML accounts to a process on one device."""
    device: str                 # "GPU 0" or "GPU 0 MIG gi=7 ci=0"
    uuid: str
    used_bytes: Optional[int]   # None: NVML does not say (e.g. no permission)


def process_memory(nvml: Any, pid: int) -> list[DeviceMemory]:
    """Where NVML sees process ``pid`` running, and the memory it uses
    there. A process in another PID namespace (a container) is not found."""
    def body(nvml: Any) -> list[DeviceMemory]:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mode = mig_mode(nvml, handle)
            devices = [(f"GPU {index}", handle)]
            if mode is not None and mode[0] == 1:
                devices = [(None, h) for h in mig_handles(nvml, index, handle)]
            for label, h in devices:
                try:
                    procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
                except _nvml_error(nvml):
                    continue  # NotSupported / NoPermission: nothing to read here
                for p in procs:
                    if p.pid == pid:
                        if label is None:
                            label = (f"GPU {index} MIG gi={nvml.nvmlDeviceGetGpuInstanceId(h)} "
                                     f"ci={nvml.nvmlDeviceGetComputeInstanceId(h)}")
                        used = p.usedGpuMemory
                        found.append(DeviceMemory(label, _text(nvml.nvmlDeviceGetUUID(h)),
                                                  None if used is None else int(used)))
        return found

    return _session(nvml, body)
