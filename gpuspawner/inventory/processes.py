"""What each process uses of a GPU, as NVML accounts it: the readings the
memory watch of shared GPUs (gpuspawner/isolation/share_memory.py) and the
culler's per-share activity (gpuspawner/culler/shares.py) are made of.

Per GPU (by UUID, ``nvmlDeviceGetHandleByUUID``; a MIG device's ``MIG-...``
UUID works too):

- ``nvmlDeviceGetComputeRunningProcesses`` -> objects with ``pid`` and
  ``usedGpuMemory`` in bytes; pynvml turns NVML_VALUE_NOT_AVAILABLE into
  ``None`` (older releases passed the raw 2**64-1 on: treated alike);
- ``nvmlDeviceGetProcessUtilization(handle, lastSeenTimeStamp)`` -> the
  samples (``pid``, ``timeStamp`` in microseconds, ``smUtil``, ``memUtil``
  in %) newer than the time stamp; ``NotFound`` (or pynvml's
  ``NVMLError(NVML_SUCCESS)`` when there was nothing to size) means no
  process had a sample since then (known: all idle), a sample's
  0xFFFFFFFF is "not available" and is skipped. The caller hands back
  ``last_seen_us``.

Nothing here raises for a GPU: a call NVML refuses (``NotSupported``,
``NoPermission``, a lost GPU, an unknown UUID) leaves that figure ``None``
(unknown) with the error in ``errors``; no NVML at all gives every GPU
unknown. PIDs are as the driver sees them (the host's PID namespace).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from .model import InventoryError
from .nvml import _describe, _not_found, _nvml_error, _session, _MIB

__all__ = ["ProcessReading", "read_processes"]

_NOT_AVAILABLE_ULL = 2 ** 64 - 1
_SUCCESS = 0
_PERCENT_MAX = 100


@dataclass(frozen=True)
class ProcessReading:
    """One GPU's per-process figures at one moment; None: unknown."""
    uuid: str
    total_mib: Optional[int] = None
    used_mib: Optional[int] = None
    # pid -> MiB NVML accounts to it (None for a process it gives no figure for)
    memory_mib: Optional[dict] = None
    # pid -> highest SM utilisation % of its samples since the time stamp
    # (a process with none had no SM activity in that time)
    sm_pct: Optional[dict] = None
    last_seen_us: int = 0            # pass back as since_us next time
    errors: list = field(default_factory=list)


def _memory(nvml: Any, handle: Any) -> dict:
    out = {}
    for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        used = p.usedGpuMemory
        out[int(p.pid)] = None if used is None or used == _NOT_AVAILABLE_ULL else int(used) // _MIB
    return out


def _utilisation(nvml: Any, handle: Any, since_us: int) -> tuple[dict, int]:
    try:
        samples = nvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except _nvml_error(nvml) as e:
        # No samples since then: nobody was busy. NVML says NotFound; pynvml
        # turns a first call that finds nothing to size into NVMLError(SUCCESS).
        if _not_found(nvml, e) or getattr(e, "value", None) == _SUCCESS:
            return {}, since_us
        raise
    out, last = {}, since_us
    for s in samples:
        last = max(last, int(s.timeStamp))
        if 0 <= s.smUtil <= _PERCENT_MAX:
            out[int(s.pid)] = max(out.get(int(s.pid), 0), int(s.smUtil))
    return out, last


def _one(nvml: Any, uuid: str, since_us: int) -> ProcessReading:
    err = _nvml_error(nvml)
    errors = []

    def attempt(what: str, fn):
        try:
            return fn()
        except err as e:
            errors.append(f"{what}: {_describe(e)}")
            return None

    handle = attempt("handle", lambda: nvml.nvmlDeviceGetHandleByUUID(uuid))
    if handle is None:
        return ProcessReading(uuid, last_seen_us=since_us, errors=errors)
    info = attempt("memory info", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    memory = attempt("processes", lambda: _memory(nvml, handle))
    util = attempt("process utilisation", lambda: _utilisation(nvml, handle, since_us))
    return ProcessReading(
        uuid, None if info is None else int(info.total) // _MIB,
        None if info is None else int(info.used) // _MIB, memory,
        None if util is None else util[0], since_us if util is None else util[1], errors)


def read_processes(uuids: Sequence[str], since_us: Mapping[str, int] = {},
                   nvml: Any = None) -> dict[str, ProcessReading]:
    """``{uuid: ProcessReading}`` for the GPUs ``uuids``; ``since_us``: each
    GPU's ``last_seen_us`` from the previous reading (0: all NVML keeps)."""
    try:
        return _session(nvml, lambda nvml: {u: _one(nvml, u, since_us.get(u, 0)) for u in uuids})
    except InventoryError as e:          # no NVML here, or it failed to start
        return {u: ProcessReading(u, last_seen_us=since_us.get(u, 0), errors=[str(e)])
                for u in uuids}
